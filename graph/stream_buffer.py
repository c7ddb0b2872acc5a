"""The buffer of one (request, streaming edge): items in, chunks out, bounded."""
from __future__ import annotations

from typing import Any

from graph.chunking import Chunk, ChunkPolicy, FixedChunk
from core.errors import GraphError


class StreamBuffer:
    """Holds only the items future chunks can need.

    Invariants: base <= delivered <= base + len(items); len(items) <= max_buffered.
    `can_push(n)` / `push(items)` pair: a producer without room is parked.
    """

    def __init__(self, policy: ChunkPolicy, max_buffered: int, name: str = "") -> None:
        # name: the edge (and request) this buffer serves, so errors name it.
        self.name = name or "stream buffer"
        if max_buffered < policy.min_buffer:
            raise GraphError(f"{self.name}: max_buffered {max_buffered} is below the policy minimum {policy.min_buffer}")
        self.policy = policy
        self.max_buffered = max_buffered
        self.items: list[Any] = []
        self.base = 0          # stream position of items[0]
        self.delivered = 0     # stream items delivered as new items
        self.is_done = False   # producer finished
        self.is_closed = False  # final chunk handed out
        # the policy cuts every item alone (FixedChunk(1)): `pass_one` may skip the window arithmetic
        self._is_single = isinstance(policy, FixedChunk) and policy.size == 1

    @property
    def available(self) -> int:
        return self.base + len(self.items)

    @property
    def num_buffered(self) -> int:
        return len(self.items)

    @property
    def credit(self) -> int:
        """Items the producer may still push before it is parked."""
        return self.max_buffered - len(self.items)

    def can_push(self, n: int) -> bool:
        return n <= self.credit

    def push(self, items) -> None:
        if self.is_done:
            raise GraphError(f"{self.name}: push after the producer's end of stream")
        if not self.can_push(len(items)):
            raise GraphError(f"{self.name}: buffer full: {len(self.items)} + {len(items)} > {self.max_buffered}")
        self.items.extend(items)

    def pass_one(self) -> int | None:
        """One item passes through as a chunk of its own while nothing waits and every
        item is one (FixedChunk(1), the per-item stream): its stream position, the start
        of the chunk (item,) that push + pop_ready would give, without their window
        arithmetic and without building the chunk (the caller has the item). None: take
        the general path."""
        if not self._is_single or self.items or self.is_done:
            return None
        start = self.base
        self.base = self.delivered = start + 1
        return start

    def finish(self) -> None:
        self.is_done = True

    def pop_ready(self) -> list[Chunk]:
        """Every chunk that can be formed now; the final one carries is_last."""
        chunks = []
        while not self.is_closed:
            window = self.policy.next_window(self.delivered, self.available, self.is_done)
            if window is None:
                if self.is_done:  # ended on a boundary: an empty final chunk
                    chunks.append(Chunk((), self.available, 0, is_last=True))
                    self.is_closed = True
                break
            chunks.append(self._take(*window))
        return chunks

    def _take(self, start: int, end: int) -> Chunk:
        items = tuple(self.items[start - self.base:end - self.base])
        num_context = max(0, self.delivered - start)
        is_last = self.is_done and end == self.available
        num_pad = 0
        if is_last and self.policy.pad_final:
            num_pad = max(0, self.policy.full_new(self.delivered) - (end - start - num_context))
        self.delivered = end
        self.is_closed = is_last
        keep = self.policy.keep_from(self.delivered)
        if keep > self.base:
            del self.items[:keep - self.base]
            self.base = keep
        return Chunk(items, start, num_context, is_last, num_pad)
