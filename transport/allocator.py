"""First-fit allocator over a byte range, with coalescing frees.

First fit keeps allocations at low offsets, so a warm arena reuses pages that are
already faulted in (a first touch costs ~8x a warm copy on these machines).
"""
from __future__ import annotations

import bisect

ALIGN = 256


def align_up(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


class BlockAllocator:
    """Invariant: free + used == total, free ranges sorted, disjoint and never adjacent."""

    def __init__(self, total: int) -> None:
        self.total = total - total % ALIGN
        self._free: list[tuple[int, int]] = [(0, self.total)]  # (offset, size), sorted by offset
        self._used: dict[int, int] = {}  # offset -> size

    @property
    def used_bytes(self) -> int:
        return sum(self._used.values())

    @property
    def free_bytes(self) -> int:
        return sum(size for _, size in self._free)

    @property
    def num_used(self) -> int:
        return len(self._used)

    def _find(self, size: int) -> int:
        for i, (_, free_size) in enumerate(self._free):
            if free_size >= size:
                return i
        return -1

    def can_allocate(self, nbytes: int) -> bool:
        return self._find(align_up(max(nbytes, 1))) >= 0

    def allocate(self, nbytes: int) -> int:
        """Returns the offset of a block of at least `nbytes`; call can_allocate first."""
        size = align_up(max(nbytes, 1))
        i = self._find(size)
        if i < 0:
            raise MemoryError(f"no free block of {size} bytes")
        offset, free_size = self._free[i]
        if free_size == size:
            del self._free[i]
        else:
            self._free[i] = (offset + size, free_size - size)
        self._used[offset] = size
        return offset

    def free(self, offset: int) -> None:
        size = self._used.pop(offset)
        i = bisect.bisect_left(self._free, (offset, 0))
        if i < len(self._free) and self._free[i][0] == offset + size:  # merge with next
            size += self._free.pop(i)[1]
        if i > 0 and sum(self._free[i - 1]) == offset:  # merge with previous
            offset, prev_size = self._free.pop(i - 1)
            size += prev_size
            i -= 1
        self._free.insert(i, (offset, size))

    def check_integrity(self) -> None:
        spans = sorted(list(self._free) + list(self._used.items()))
        pos = 0
        for offset, size in spans:
            assert offset == pos, f"gap or overlap at {pos} (next span at {offset})"
            pos += size
        assert pos == self.total, f"spans cover {pos} of {self.total} bytes"
        assert self.free_bytes + self.used_bytes == self.total
        for (a, sa), (b, _) in zip(self._free, self._free[1:]):
            assert a + sa < b, f"free ranges at {a} and {b} are adjacent: not coalesced"
