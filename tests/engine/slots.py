"""Per-token KV slot math, for tests that check the runner's vectorized slot mapping (and
the scheduler simulation's fake cache) against the block tables one token at a time."""
from __future__ import annotations

from engine.kv_pool import KVPool
from engine.sequence import Sequence


def slot(pool: KVPool, seq: Sequence, position: int) -> int:
    """Flat cache slot (block * block_size + offset) of the token at position."""
    if not 0 <= position < len(seq.block_table) * pool.block_size:
        raise IndexError(f"position {position} outside the {len(seq.block_table)} blocks "
                         f"of request {seq.request_id!r}")
    return seq.block_table[position // pool.block_size] * pool.block_size + position % pool.block_size


def slots(pool: KVPool, seq: Sequence, start: int, end: int) -> list[int]:
    """slot() for positions start..end-1 (the slot mapping of one step's query tokens)."""
    return [slot(pool, seq, p) for p in range(start, end)]
