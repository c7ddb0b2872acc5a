"""Shared, read-only prefixes: timesteps several rollouts have in common (a plan's
context), computed and stored once. A prefix owns its blocks in the KV pool under its
own id; each rollout reading it holds a reference, and so does its creator until it
releases it; the blocks return to the pool when the last reference goes. Reading never
writes a shared block (the predictor is block-causal), so no copy-on-write is needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.kv_pool import IntegrityError, KVPool
from engine.models.vjepa2_ac.rollouts import BlockSeq


@dataclass
class SharedPrefix:
    seq: BlockSeq
    num_steps: int
    group: str
    refs: int = 1  # the creator's


class PrefixTable:
    def __init__(self, pool: KVPool) -> None:
        self.pool = pool
        self.prefixes: dict[str, SharedPrefix] = {}

    def add(self, prefix_id: str, group: str, num_steps: int) -> SharedPrefix:
        if prefix_id in self.prefixes:
            raise IntegrityError(f"prefix {prefix_id!r} exists already")
        prefix = self.prefixes[prefix_id] = SharedPrefix(BlockSeq(prefix_id), num_steps, group)
        return prefix

    def acquire(self, prefix_id: str) -> SharedPrefix:
        prefix = self.prefixes[prefix_id]
        prefix.refs += 1
        return prefix

    def release(self, prefix_id: str) -> None:
        prefix = self.prefixes[prefix_id]
        prefix.refs -= 1
        if prefix.refs == 0:
            self.pool.free(prefix.seq)
            del self.prefixes[prefix_id]

    def drop_group(self, group: str) -> None:
        """Frees every prefix of `group` (its rollouts are gone)."""
        for prefix_id in [p for p, sp in self.prefixes.items() if sp.group == group]:
            self.pool.free(self.prefixes.pop(prefix_id).seq)

    def check(self, readers: dict[str, int]) -> None:
        """readers: prefix id -> live rollouts reading it."""
        for prefix_id, prefix in self.prefixes.items():
            expected = readers.get(prefix_id, 0)
            if prefix.refs not in (expected, expected + 1):
                raise IntegrityError(f"prefix {prefix_id!r} has {prefix.refs} references, {expected} readers")
        unknown = set(readers) - set(self.prefixes)
        if unknown:
            raise IntegrityError(f"rollouts read freed prefixes {sorted(unknown)}")
