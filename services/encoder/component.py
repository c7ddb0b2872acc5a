"""The shared media encoder: one stateless, batched component over the towers a model's
encoder hook gives (services/encoder/towers.py), servable alone and shareable by every
model whose checkpoint holds the same towers.

Node `media_encoder`: {"media": uint8 [n], "media_parts": int64 [k, 2]} (a request's
media parts in prompt order, services/encoder/media_list.py) -> {"rows", "deepstack",
"parts", "seconds"} (every part's rows, in the same order). open() decodes each part and
extracts its features, so bad media fails there as INVALID_ARGUMENT naming the part
(`open.inputs[image][1]`); each part is then one work item of its tower, so each step
runs every queued part of one tower (of every request) in one forward, and a request's
outputs leave once all of its parts are done. A failing part fails its request alone.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from core.errors import InvalidArgument, ResourceExhausted
from engine.stateless_engine import StatelessConfig, WorkItem, WorkResult
from runtime.grpc_status import failure
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode, OutboundEvent
from runtime.stateless_component import StatelessComponent
from services.encoder.media_list import EncodedPart, pack_encoded, unpack_media
from services.encoder.towers import EncoderHook, Tower, kinds_of

MEDIA_NODE = "media_encoder"


@dataclass
class _Pending:
    """One open run: its parts' kinds and results (None until its tower ran)."""

    item: OpenNode
    kinds: list[str]
    results: list[EncodedPart | None] = field(default_factory=list)


class MediaEncoderComponent(StatelessComponent):
    name = "encoder"
    nodes = (MEDIA_NODE,)

    def __init__(self, towers: Mapping[str, Tower], config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.towers = dict(towers)
        self.by_kind = kinds_of(self.towers)
        self.pending: dict[tuple[str, tuple[int, ...]], _Pending] = {}

    def open(self, item: OpenNode, inputs: dict[str, Any]) -> None:
        if item.node not in self.nodes:
            raise InvalidArgument(f"open.node {item.node!r}: the {self.name} component runs {list(self.nodes)}")
        works = []
        for part in unpack_media(inputs):
            tower = self.by_kind.get(part.kind)
            if tower is None:
                raise InvalidArgument(f"{part.field}: this encoder service has no tower for {part.kind} "
                                      f"(it encodes {sorted(self.by_kind)})")
            works.append((tower, part.kind, self.towers[tower].prepare(part.kind, part.data, part.field)))
        if self.engine.num_queued + len(works) > self.engine.config.max_queued:
            raise ResourceExhausted(f"open: the {self.name} queue is full ({self.engine.num_queued} items)")
        key = (item.request_id, item.iteration)
        self.pending[key] = _Pending(item, [k for _, k, _ in works], [None] * len(works))
        for i, (tower, _, payload) in enumerate(works):
            self.engine.add(WorkItem(item.request_id, tower, payload, tag=(key, i), pace=item.pace))

    def run(self, key: str, payloads: list[Any]) -> list[EncodedPart]:
        return self.towers[key].run(payloads)

    def events_for(self, result: WorkResult) -> list[OutboundEvent]:
        key, index = result.item.tag
        run = self.pending.get(key)
        if run is None:
            return []  # its request failed or was cancelled meanwhile
        item = run.item
        if not result.ok:
            self._drop(key)
            status, message = failure(result.error, f"node {item.node}")
            return [NodeError(item.request_id, item.node, status, message, item.iteration)]
        run.results[index] = result.output
        if any(r is None for r in run.results):
            return []
        del self.pending[key]
        tensors = pack_encoded(run.kinds, run.results)
        return [NodeOutput(item.request_id, item.node, tensors, item.iteration),
                NodeDone(item.request_id, item.node, iteration=item.iteration)]

    def _drop(self, key: tuple[str, tuple[int, ...]]) -> None:
        """Forgets a run and its parts still queued (its request has failed)."""
        self.pending.pop(key, None)
        self.engine.queue = deque(w for w in self.engine.queue if w.tag[0] != key)

    def cancel(self, request_id: str) -> None:
        super().cancel(request_id)
        for key in [k for k in self.pending if k[0] == request_id]:
            del self.pending[key]

    def load(self) -> dict:
        return {"queued": self.engine.num_queued, "runs": len(self.pending)}

    def close(self) -> None:
        super().close()
        self.pending.clear()


def encoder_hook(checkpoint: str, hooks: tuple[str, ...]) -> EncoderHook:
    """The first registered model's EncoderHook for `checkpoint`; InvalidArgument when none has one."""
    from services.model_hooks import first_hook

    return first_hook(hooks, checkpoint, EncoderHook, "encoder", "media towers")


def encoders_from_checkpoint(checkpoint: str, towers: str = "", dtype: str = "float32", device: str = "cpu",
                             max_batch_size: int = 8, max_queued: int = 1024,
                             hooks: tuple[str, ...] = ()) -> MediaEncoderComponent:
    """`starmesh serve encoder --checkpoint DIR`: the towers the checkpoint's model hook
    gives (all of them, or those `towers` names, e.g. "audio" or "audio,vision") in one
    component serving node media_encoder."""
    hook = encoder_hook(checkpoint, hooks)
    names = [t.strip() for t in towers.split(",") if t.strip()] or list(hook.towers)
    bad = [t for t in names if t not in hook.towers]
    if bad:
        raise InvalidArgument(f"towers {towers!r}: name {' and/or '.join(hook.towers)}")
    loaded = {name: hook.towers[name](dtype, device) for name in dict.fromkeys(names)}
    return MediaEncoderComponent(loaded, StatelessConfig(max_batch_size=max_batch_size, max_queued=max_queued))
