"""Kept KV contexts on the conductor: whose they are, what each run is told, and which
replica holds each one.

Owner: the caller's API key (its SHA-256, never the key itself), refined by the end
user a front end names in `x-starmesh-end-user` metadata (a gateway serves many users
over one key, and one user must not continue another's conversation). Without an API
key the end user alone names the owner; ids stay unguessable either way.

The directory remembers, per context id, the replicas that kept its parts (one per
engine: thinker, talker), so a request continuing it goes where its KV is. It is bounded (least recently used
forgotten first): a forgotten id routes like any request and, if the replica chosen
does not hold it, the request is NOT_FOUND there.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any, Callable, Iterable, Mapping, Sequence

from conductor.prefix_directory import PrefixDirectory
from core.bearer import AUTHORIZATION, bearer_token
from core.context_use import END_USER, ContextUse, new_context_id
from core.held_media import HELD_MEDIA, part_digests

MAX_END_USER = 256  # bytes of an end-user name kept in an owner


def owner_of(metadata: Iterable[tuple[str, Any]] | None) -> str:
    """The owner of the contexts a call makes or reads, from its metadata."""
    key, user = "", ""
    for k, v in metadata or ():
        token = bearer_token(v) if k == AUTHORIZATION and isinstance(v, str) else None
        if token is not None:
            key = hashlib.sha256(token.encode()).hexdigest()[:32]
        elif k == END_USER and isinstance(v, str):
            user = v[:MAX_END_USER]
    return f"{key}/{user}"


def uses_for(params: Mapping[str, Any], owner: str) -> tuple[ContextUse, ...]:
    """What every run of a request is told about kept contexts (params already validated:
    context_id is a well-formed id when present)."""
    read = params.get("context_id") or ""
    keep = new_context_id() if params.get("keep_context") is True else ""
    return (ContextUse(read, keep, owner),) if (read or keep) else ()


class ContextDirectory:
    """context id -> endpoints of the replicas that keep its parts, and the digests of the
    media parts it was built from (core/held_media.py)."""

    def __init__(self, capacity: int = 65536) -> None:
        self.capacity = capacity
        self._where: OrderedDict[str, tuple[frozenset[str], frozenset[str]]] = OrderedDict()

    def kept(self, context_id: str, endpoints: Iterable[str], media: Iterable[str] = ()) -> None:
        self._where[context_id] = (frozenset(endpoints), frozenset(media))
        self._where.move_to_end(context_id)
        while len(self._where) > self.capacity:
            self._where.popitem(last=False)

    def holders(self, context_id: str) -> frozenset[str]:
        return self._entry(context_id)[0]

    def media(self, context_id: str) -> frozenset[str]:
        """Digests of the media parts the context holds (empty: none, or not known here)."""
        return self._entry(context_id)[1]

    def _entry(self, context_id: str) -> tuple[frozenset[str], frozenset[str]]:
        entry = self._where.get(context_id)
        if entry is None:
            return frozenset(), frozenset()
        self._where.move_to_end(context_id)
        return entry

    def __len__(self) -> int:
        return len(self._where)


class KeptContexts:
    """The conductor's side of kept contexts and cached prefixes for its requests: what runs
    are told, where a request goes (the replica keeping the context it continues, else the
    one holding most of its prompt), and what replicas reported when a request ended."""

    def __init__(self, directory: ContextDirectory | None = None, prefixes: PrefixDirectory | None = None) -> None:
        self.directory = directory or ContextDirectory()
        self.prefixes = prefixes or PrefixDirectory()

    def begin(self, request_id: str, params: Mapping[str, Any], metadata, selector,
              prompt_ids: Callable[[], Sequence[int]] = tuple) -> tuple[ContextUse, ...]:
        """The request's context uses, after holding it (selector: its model's
        ReplicaSelector, None in-process) to the replicas that keep the context it continues
        or, naming none, to those whose caches hold most of its prompt. prompt_ids() reads
        the prompt: only called when a summary is known and a service has a replica to
        choose, so one-replica deployments never read or hash prompts for it."""
        uses = uses_for(params, owner_of(metadata))
        if selector is not None:
            if uses and uses[0].read_id:
                selector.hold(request_id, self.directory.holders(uses[0].read_id))
            elif len(self.prefixes) and selector.has_choice():
                ids = prompt_ids()
                if ids:
                    selector.hold(request_id, self.prefixes.longest(ids))
        return uses

    def with_held_media(self, inputs: dict, uses: tuple[ContextUse, ...], report: dict) -> dict:
        """A request's walk inputs, with HELD_MEDIA when the context it continues holds
        some of its media parts; report["media"]: the parts the context it keeps will hold
        (the continued one's and its own), recorded at end()."""
        if not uses:
            return inputs
        digests = media_digests(inputs)
        held = self.directory.media(uses[0].read_id) if uses[0].read_id else frozenset()
        if uses[0].keep_id:
            report["media"] = held | set(digests)
        if not (held and any(d in held for d in digests)):
            return inputs
        import torch

        return {**inputs, HELD_MEDIA: (torch.tensor([int(d in held) for d in digests], dtype=torch.int64),)}

    def end(self, report: Mapping[str, Any]) -> None:
        """The request ended; `report` is what its nodes said (RequestRun.note)."""
        if report.get("context_id"):
            self.directory.kept(report["context_id"], report.get("holders", {}).values(), report.get("media", ()))
        if report.get("prefix_summary"):
            self.prefixes.publish(*report["prefix_summary"])


def media_digests(inputs: Mapping[str, Any]) -> list[str]:
    """Each media part's digest, from the walk inputs media / media_parts (tensors the
    conductor made of content parts, or a client's inline TensorRefs); [] without media."""
    if "media" not in inputs or "media_parts" not in inputs:
        return []
    import torch

    media, table = inputs["media"][0], inputs["media_parts"][0]
    data = media.numpy().tobytes() if isinstance(media, torch.Tensor) else media.location.data
    if not isinstance(table, torch.Tensor):
        from transport.codec import view

        table = view(table.location.data, table.dtype, table.shape)
    return part_digests(data, table.reshape(-1, 2)[:, 1].tolist())
