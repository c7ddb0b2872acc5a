"""Backpressure on the conductor: producers get only as many items as there is room
for downstream (stream buffers, the client's backlog).

A routed edge's window is its producer's runtime's (runtime.route_out), not counted here.
A loop run inside a component gets credits per output port (OpenNode.credits, then
Credit items as room frees up); any other run starts only when one more output fits.
Client-bound items are *reserved* when a run is dispatched or credited and released
when they reach the client's queue, so queue + reserved <= the backlog bound.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from graph.node import WALK_OUTPUT

if TYPE_CHECKING:
    from conductor.walk_state import Tag, WalkState

UNBOUNDED = 1 << 30
MIN_GRANT = 16


class CreditLedger:
    def __init__(self, state: "WalkState", client_room: Callable[[], int]) -> None:
        self.state = state
        self.scope = state.scope
        self.client_room = client_room  # outputs the client's backlog can still take
        self.outstanding: dict[tuple[str, Tag, str], int] = {}  # loop run port -> granted, not produced
        self.reserved = 0  # client-bound items granted or dispatched, not yet queued
        self.is_waiting_room = False  # a run could not start for want of room (cleared per scan)
        self._num_to_client: dict[tuple[str, str | None], int] = {}
        self._buffered: dict[tuple[str, str | None], list] = {}

    def _client_free(self) -> int:
        return self.client_room() - self.reserved

    def _to_client(self, node: str, port: str | None = None) -> int:
        """Client-bound edges out of `node` (its `port`); fixed for the walk, so counted once."""
        count = self._num_to_client.get((node, port))
        if count is None:
            count = self._num_to_client[(node, port)] = sum(
                1 for e in self.scope.out_edges[node] if e.dst_node == WALK_OUTPUT
                and e.dst_port not in self.state.silent and (port is None or e.src_port == port))
        return count

    def _buffer_room(self, node: str, tag: "Tag", port: str | None = None) -> int:
        edges = self._buffered.get((node, port))
        if edges is None:  # the streams out of `node` the conductor buffers: fixed for the walk
            edges = self._buffered[(node, port)] = [
                (e, self.scope.common(node, e.dst_node)) for e in self.scope.out_edges[node]
                if e.is_streaming and e not in self.scope.routed and (port is None or e.src_port == port)]
        return min((self.state.buffer(e, tag[:depth]).credit for e, depth in edges), default=UNBOUNDED)

    def can_run(self, node: str, tag: "Tag") -> bool:
        """A run producing one item per output may start: room downstream, reserved."""
        needed = self._to_client(node)
        if self._buffer_room(node, tag) < 1 or (needed and self._client_free() < needed):
            self.is_waiting_room = True
            return False
        self.reserved += needed
        return True

    def initial(self, node: str, tag: "Tag") -> dict[str, int]:
        """Initial credits of a loop run inside a component, or of the chunk runs a
        routed edge opens at `tag` + (k,), for their bounded ports."""
        if node not in self.scope.inner and node not in self.scope.routed_in:
            return {}
        credits = {}
        for port in {e.src_port for e in self.scope.out_edges[node]}:
            grant = self._grant(node, tag, port, outstanding=0)
            if grant is not None:
                credits[port] = grant
                self.outstanding[(node, tag, port)] = grant
        return credits

    def _grant(self, node: str, tag: "Tag", port: str, outstanding: int, min_grant: int = 0) -> int | None:
        """How many more items `port` may produce now (0 below `min_grant`); None when
        it is not bounded."""
        room = self._buffer_room(node, tag, port)
        bounded = room < UNBOUNDED
        room -= outstanding
        if self._to_client(node, port):
            room, bounded = min(room, self._client_free()), True
        if not bounded:
            return None
        grant = max(0, room)
        if grant < min_grant:
            return 0
        self.reserved += grant * self._to_client(node, port)
        return grant

    def replenish(self) -> list[tuple[str, "Tag", str, int]]:
        """Credit grants (node, run tag, port, amount) for space freed downstream."""
        grants = []
        for (node, tag, port), outstanding in list(self.outstanding.items()):
            if (node, tag) in self.state.done:
                continue
            # a run that still has credit is topped up in batches: one Credit per
            # MIN_GRANT items at most, not one per item the client takes
            grant = self._grant(node, tag, port, outstanding, 1 if outstanding <= 0 else MIN_GRANT)
            if grant:
                self.outstanding[(node, tag, port)] += grant
                grants.append((node, tag, port, grant))
        return grants

    def produced(self, node: str, run_tag: "Tag", outputs) -> None:
        for port in outputs:
            key = (node, run_tag, port)
            if key in self.outstanding:
                self.outstanding[key] -= 1

    def finished(self, node: str, run_tag: "Tag") -> None:
        """A loop run inside a component ended: credit it was granted but never used
        is no longer reserved (else nodes after the loop could wait for client room forever)."""
        for key in [k for k in self.outstanding if k[0] == node and k[1] == run_tag]:
            unused = max(0, self.outstanding.pop(key))
            self.reserved = max(0, self.reserved - unused * self._to_client(node, key[2]))

    def delivered(self, count: int = 1) -> None:
        """`count` reserved items reached the client's queue."""
        self.reserved = max(0, self.reserved - count)

    def dropped(self, nodes: list[str]) -> None:
        """Runs discarded after a stop never deliver what they reserved."""
        self.reserved = max(0, self.reserved - sum(self._to_client(n) for n in nodes))
