"""Paged KV block accounting. The KV tensors themselves belong to the model runner
(shape [num_blocks, block_size, ...] per layer); this only decides which request owns
which block, so it stays cheap, device-free and easy to check.
"""
from __future__ import annotations

from collections import deque
from itertools import islice
from typing import TYPE_CHECKING

from core.errors import ResourceExhausted

if TYPE_CHECKING:
    from engine.sequence import Sequence


class IntegrityError(RuntimeError):
    """The block accounting is inconsistent: a bug, never a user error."""


class KVPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        # Both > 0: the SchedulerConfig that sizes the pool validated them.
        self.block_size = block_size
        self.total = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._owner: dict[int, str] = {}  # used block -> request id

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return len(self._owner)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks for seq to hold num_cached_tokens + num_new_tokens tokens."""
        want = self.blocks_for(seq.num_cached_tokens + num_new_tokens)
        return max(0, want - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= len(self._free)

    def next_free_blocks(self, n: int) -> list[int]:
        """The blocks the next n single-block allocations will hand out, in order (the free
        list is FIFO); engine/plan_ahead.py predicts the next step's page table with it."""
        return list(islice(self._free, n))

    def max_new_tokens_fitting(self, seq: Sequence) -> int:
        """How many new tokens seq could take now: the rest of its blocks + the free ones."""
        capacity = (len(seq.block_table) + len(self._free)) * self.block_size
        return max(0, capacity - seq.num_cached_tokens)

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        need = self.blocks_needed(seq, num_new_tokens)
        if need > len(self._free):
            raise ResourceExhausted(
                f"KV pool has {len(self._free)} free blocks, request {seq.request_id!r} needs {need}")
        for _ in range(need):
            block = self._free.popleft()
            self._owner[block] = seq.request_id
            seq.block_table.append(block)

    def free(self, seq: Sequence) -> None:
        for block in seq.block_table:
            owner = self._owner.pop(block, None)
            if owner != seq.request_id:
                raise IntegrityError(f"block {block} freed by {seq.request_id!r} but owned by {owner!r}")
            self._free.append(block)
        seq.block_table.clear()

    def owner(self, block: int) -> str | None:
        return self._owner.get(block)

    def check_integrity(self) -> None:
        free = set(self._free)
        if len(free) != len(self._free):
            raise IntegrityError("free list has duplicates")
        if free & self._owner.keys():
            raise IntegrityError(f"blocks both free and used: {sorted(free & self._owner.keys())}")
        if len(free) + len(self._owner) != self.total:
            raise IntegrityError(f"free {len(free)} + used {len(self._owner)} != total {self.total}")
        if not all(0 <= b < self.total for b in (*free, *self._owner)):
            raise IntegrityError("block id out of range")
