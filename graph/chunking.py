"""Chunk policies of streaming edges (M*'s Algorithm 3) and the bounded
per-(request, edge) buffer that applies them.

A policy only decides positions: given how many stream items were already delivered
as *new* items and how many have arrived, where the next chunk starts and ends. A
chunk = [start, end) of the stream; items before `delivered` are its context, and
they are exactly the stream items just before its new items.
Invariant of every policy: concatenating each chunk's new items reproduces the
stream exactly, residual included.

End of stream (`done`), with r = the residual (0 < r < the full new-item count):
- FixedChunk(K): a final short chunk of the r items; pad_final: num_pad = K - r.
- LeftContext(C, L): a final chunk of the r items after their (up to) L context
  items; pad_final: num_pad = C - r.
- SlidingWindow(W, S): without pad_final the final window is the *last W items*
  (fewer when the whole stream is shorter than W): a full-size window whose new
  items are the r items not yet delivered, the rest its context. With pad_final
  the final window stays at its regular position (the next window's start) with
  its r new items, and num_pad = S - r (W - n for a stream shorter than W)
  padding items complete it to W items. Either way the consumer sees W inputs.
In every pad_final case `len(new_items) + num_pad == policy.full_new(delivered)`, with
`delivered` the stream position of the chunk's first new item.
A stream that ends on a chunk boundary gets an empty final chunk (is_last, no
items, num_pad 0), so the consumer always learns the end.

`min_buffer` is the smallest buffer that can always form the next chunk (the
items kept for context plus one chunk's new items): a smaller bound would park
the producer forever.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.errors import GraphError


@dataclass(frozen=True)
class Chunk:
    items: tuple[Any, ...]  # context items first, then new items
    start: int              # stream position of items[0]
    num_context: int        # leading items delivered by earlier chunks
    is_last: bool = False
    num_pad: int = 0        # padding items the consumer appends (pad_final policies)

    @property
    def new_items(self) -> tuple[Any, ...]:
        return self.items[self.num_context:]

    @property
    def end(self) -> int:
        return self.start + len(self.items)


class ChunkPolicy:
    """Base of the three policies; subclasses are frozen dataclasses."""

    pad_final: bool = False

    @property
    def min_buffer(self) -> int:
        """Items a buffer must be able to hold to ever form a chunk."""
        raise NotImplementedError

    def next_window(self, delivered: int, available: int, done: bool) -> tuple[int, int] | None:
        """(start, end) of the next chunk, or None until more items arrive."""
        raise NotImplementedError

    def keep_from(self, delivered: int) -> int:
        """Earliest stream position any future chunk can need (older items are dropped)."""
        raise NotImplementedError

    def full_new(self, delivered: int) -> int:
        """New items of a full chunk whose first new item is at `delivered` (the padding target)."""
        raise NotImplementedError


@dataclass(frozen=True)
class FixedChunk(ChunkPolicy):
    """Every K items, no context (Thinker -> Talker uses K = 1)."""

    size: int
    pad_final: bool = False

    def __post_init__(self) -> None:
        if self.size < 1:
            raise GraphError(f"FixedChunk size must be >= 1, got {self.size}")

    @property
    def min_buffer(self) -> int:
        return self.size

    def next_window(self, delivered, available, done):
        if available >= delivered + self.size:
            return delivered, delivered + self.size
        return (delivered, available) if done and available > delivered else None

    def keep_from(self, delivered):
        return delivered

    def full_new(self, delivered):
        return self.size


@dataclass(frozen=True)
class SlidingWindow(ChunkPolicy):
    """Windows of W items advancing by S (S <= W: overlap W - S is context).

    Windows over n items: 0 if n < W, else 1 + (n - W) // S (formula (6)). The residual
    is flushed as the last W items (fewer if the stream is shorter than W), or with
    pad_final as the regular next window padded to W (see the module docstring).
    """

    window: int
    stride: int
    pad_final: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.stride <= self.window:
            raise GraphError(f"SlidingWindow needs 1 <= stride <= window, got W={self.window} S={self.stride}")

    @property
    def min_buffer(self) -> int:
        # Without padding the residual window may reach back W - 1 items, so those
        # stay buffered while the next S arrive.
        return self.window if self.pad_final else self.window + self.stride - 1

    def _next_end(self, delivered: int) -> int:
        return self.window if delivered == 0 else delivered + self.stride

    def next_window(self, delivered, available, done):
        end = self._next_end(delivered)
        if available >= end:
            return end - self.window, end
        if not (done and available > delivered):
            return None
        if self.pad_final:
            return end - self.window, available
        return max(0, available - self.window), available

    def keep_from(self, delivered):
        if self.pad_final:  # every future window starts at the regular position
            return max(0, self._next_end(delivered) - self.window)
        return max(0, delivered + 1 - self.window)  # a residual window may reach back W - 1

    def full_new(self, delivered):
        return self.window if delivered == 0 else self.stride


@dataclass(frozen=True)
class LeftContext(ChunkPolicy):
    """Chunks of C new items plus the L items before them (Talker -> Code2Wav).

    Input items per new item tend to 1 + L / C (formula (7)). `first` > 0 makes the
    first chunk that many items (a small first chunk cuts time to first audio), and each
    later one `growth` times the one before (rounded up) until C: 4, 6, 9, 14, ..., C, C
    A stream keeps playing only if every chunk is made while the one before it plays,
    so the ratio of two chunks is the speed over real time the producer needs then: a
    first chunk of 4 frames followed at once by 25 needs 6x. growth 0: C right after
    the first chunk.
    """

    chunk: int
    left: int
    pad_final: bool = False
    first: int = 0
    growth: float = 1.5

    def __post_init__(self) -> None:
        if self.chunk < 1 or self.left < 0 or self.first < 0:
            raise GraphError(f"LeftContext needs chunk >= 1, left >= 0 and first >= 0, "
                             f"got C={self.chunk} L={self.left} first={self.first}")
        if not (self.growth == 0 or 1 < self.growth <= 16):
            raise GraphError(f"LeftContext growth must be 0 (off) or in (1, 16], got {self.growth}")

    @property
    def min_buffer(self) -> int:
        return max(self.chunk, self.first) + self.left

    def next_window(self, delivered, available, done):
        start = max(0, delivered - self.left)
        size = self.full_new(delivered)
        if available >= delivered + size:
            return start, delivered + size
        return (start, available) if done and available > delivered else None

    def keep_from(self, delivered):
        return max(0, delivered - self.left)

    def full_new(self, delivered):
        if not self.first:
            return self.chunk
        position, size = 0, self.first
        while position < delivered:  # the chunks before `delivered`, smallest first
            position += size
            size = min(self.chunk, math.ceil(size * self.growth)) if self.growth else self.chunk
        return size
