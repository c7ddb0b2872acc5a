"""Request ids scoped to the stream that opened them.

A request id on a Run stream names that stream's request, not the replica's: when a
stream opens (OpenNode, AcceptRoute) an id another stream already holds, it gets a
request of its own under a local id ("<id>#<n>", never seen outside this replica), so
nobody can take, block or touch another stream's request by naming its id, whoever
opened first. Items the stream sends later naming the id reach its own request;
events back carry the id the stream named. Routed pushes need no scope: their route
token names the request (the grant's stream owns it).

The first stream to name an id keeps it as the local id: the usual case (one conductor
stream per replica naming each request) costs one dict lookup per item, and an id that
exists once reads the same in every log and span.

Engine thread only, except `wire_id`: single dict reads, safe from the event loop
(heartbeats) under the GIL.
"""
from __future__ import annotations

from typing import Callable


class RequestScopes:
    def __init__(self) -> None:
        self._local: dict[tuple[str, str], str] = {}  # (stream, the id it named) -> local id
        self._named: dict[str, tuple[str, str]] = {}  # local id -> (stream, the id it named)
        self._count = 0

    def local(self, stream_id: str, request_id: str) -> str | None:
        """The local id of a request `stream_id` opened as `request_id` under another id."""
        return self._local.get((stream_id, request_id)) if self._local else None

    def is_local(self, request_id: str) -> bool:
        """`request_id` is a local id standing for another one."""
        return request_id in self._named

    def make(self, stream_id: str, request_id: str, is_taken: Callable[[str], bool]) -> str:
        """A new local id for `request_id` on `stream_id`; is_taken(id): the id is in use."""
        while True:
            self._count += 1
            local = f"{request_id}#{self._count}"
            if not is_taken(local) and local not in self._named:
                break
        self._local[(stream_id, request_id)] = local
        self._named[local] = (stream_id, request_id)
        return local

    def wire_id(self, request_id: str) -> str:
        """The id the owning stream named (request_id itself unless local)."""
        named = self._named.get(request_id)
        return named[1] if named is not None else request_id

    def wire_for(self, stream_id: str, request_id: str) -> str:
        """What an event about `request_id` names on `stream_id` (its own local ids only)."""
        named = self._named.get(request_id) if self._named else None
        return named[1] if named is not None and named[0] == stream_id else request_id

    def forget(self, request_id: str) -> None:
        named = self._named.pop(request_id, None)
        if named is not None:
            self._local.pop(named, None)

    def __len__(self) -> int:
        return len(self._named)
