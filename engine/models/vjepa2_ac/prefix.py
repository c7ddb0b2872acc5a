"""Shared, read-only prefixes: timesteps several rollouts have in common (a plan's
context), computed and stored once in the engine's KV pool (engine.kv_pool.KVPool).

A prefix is a chain of pool blocks its creator holds one reference to; each rollout
reading it takes the same blocks into its own block table by reference, so the blocks
return to the pool when the creator has released the prefix and the last reader has
finished, by the pool's reference counts alone. Reading never writes a shared block (the
predictor is block-causal), so no copy-on-write happens.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.kv_pool import IntegrityError, KVPool
from engine.models.vjepa2_ac.rollouts import BlockSeq


@dataclass
class SharedPrefix:
    seq: BlockSeq       # the creator's reference on each block
    num_steps: int
    group: str


class SharedPrefixes:
    def __init__(self, pool: KVPool) -> None:
        self.pool = pool
        self.prefixes: dict[str, SharedPrefix] = {}

    def add(self, prefix_id: str, group: str, num_steps: int) -> SharedPrefix:
        if prefix_id in self.prefixes:
            raise IntegrityError(f"prefix {prefix_id!r} exists already")
        prefix = self.prefixes[prefix_id] = SharedPrefix(BlockSeq(prefix_id), num_steps, group)
        return prefix

    def read(self, prefix_id: str, reader: BlockSeq) -> int:
        """Puts the prefix's blocks at the head of reader's table (by reference); returns its timesteps."""
        prefix = self.prefixes[prefix_id]
        self.pool.take(reader, prefix.seq.block_table)
        reader.num_cached_tokens = prefix.seq.num_cached_tokens
        return prefix.num_steps

    def release(self, prefix_id: str) -> None:
        """The creator's reference goes; readers keep theirs until they finish."""
        self.pool.free(self.prefixes.pop(prefix_id).seq)

    def drop_group(self, group: str) -> None:
        """Releases every prefix of `group` (its rollouts are gone)."""
        for prefix_id in [p for p, sp in self.prefixes.items() if sp.group == group]:
            self.release(prefix_id)

    def holders(self) -> list[list[int]]:
        return [p.seq.block_table for p in self.prefixes.values()]
