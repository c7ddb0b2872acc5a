"""When each value part of one walk was produced, and the hops from there to the
dispatches that consume it (kept per edge by an EdgeRecorder).

Parts are keyed by id(): a part is stamped when its run's outputs arrive and
unstamped when the walk releases it, so an id is never reused while stamped.
"""
from __future__ import annotations

from typing import Any, Iterable

from runtime.edge_stats import EdgeRecorder, now_us
from graph.chunking import Chunk
from graph.edge import GraphEdge


class EdgeTimer:
    def __init__(self) -> None:
        self.recorder = EdgeRecorder()
        self.started_us = now_us()  # the stamp of the walk's inputs and of unstamped parts
        self.stamps: dict[int, float] = {}  # id(value part) -> when it was produced (us)

    def stamp(self, outputs: dict[str, Any], produced_us: float | None = None) -> None:
        """A run's outputs arrived; `produced_us` is the producer's own clock, when it sent one."""
        stamp = produced_us or now_us()
        for value in outputs.values():
            self.stamps[id(value)] = stamp

    def forget(self, parts: Iterable[Any]) -> None:
        for part in parts:
            self.stamps.pop(id(part), None)

    def produced_us(self, value: tuple[Any, ...]) -> float:
        """A value is produced once its last part is."""
        return max((self.stamps.get(id(p), self.started_us) for p in value), default=self.started_us)

    def hop(self, edge: GraphEdge, value: tuple[Any, ...], dispatched_us: float) -> None:
        self.recorder.hop(str(edge), self.produced_us(value), dispatched_us, value[0])

    def chunk(self, edge: GraphEdge, chunk: Chunk) -> None:
        """A chunk of a streaming edge was dispatched now."""
        now = now_us()
        if edge.is_per_item:  # aggregated, one span per request
            for item in chunk.new_items:
                self.recorder.hop(str(edge), self.stamps.get(id(item), self.started_us), now, item)
        else:
            stamped = [(item, self.stamps.get(id(item), self.started_us)) for item in chunk.items]
            self.recorder.chunk(str(edge), stamped, chunk.num_context, now)
