"""Reuse of computed K/V across sequences: a sequence admitted takes the blocks its prompt
already has in the pool by reference (named full blocks, engine.block_chain; or the blocks
of the context it continues) and computes only the rest; blocks it fills are named as they
complete, so later prompts can take them.

The last token of a sequence is always computed (its logits are needed), so at most the
full blocks before it are taken from the cache; a context's blocks may end mid-block, and
the first write into such a shared block copies it (engine.kv_pool).
"""
from __future__ import annotations

from engine.kv_pool import KVPool
from engine.sequence import Sequence


class PrefixCache:
    def __init__(self, pool: KVPool, enabled: bool = True) -> None:
        self.pool = pool
        self.enabled = enabled  # off: no names, no lookups (contexts still share their blocks)
        self.lookup_tokens = 0  # prompt tokens of admitted sequences
        self.hit_tokens = 0     # of them, taken from the cache or a context instead of computed

    def reuse(self, seq: Sequence) -> int:
        """Takes seq's cached leading blocks by reference and marks their tokens computed;
        returns how many tokens that is. seq holds no blocks before."""
        pool, bs = self.pool, self.pool.block_size
        limit = seq.num_tokens - 1
        blocks: list[int] = []
        if self.enabled and seq.chain is not None and limit >= bs:
            blocks = pool.lookup(seq.chain.iter_names(seq, limit // bs, bs))
        cached, named = len(blocks) * bs, len(blocks)
        base = min(seq.base_tokens, limit)
        if base > cached:  # the context it continues covers more
            blocks, cached, named = seq.base_blocks[:pool.blocks_for(base)], base, 0
        if blocks:
            pool.take(seq, blocks)
        seq.num_cached_tokens = cached
        if seq.chain is not None:
            seq.chain.num_registered = named
        return cached

    def release(self, seq: Sequence) -> None:
        """Drops seq's blocks (a refused admission, preemption); it will be computed again."""
        self.pool.free(seq)
        seq.num_cached_tokens = 0
        if seq.chain is not None:
            seq.chain.num_registered = 0

    def admitted(self, seq: Sequence, cached: int) -> None:
        """Counts the first admission of seq, with `cached` tokens reused."""
        if seq.num_cached_prompt_tokens is None:
            seq.num_cached_prompt_tokens = min(cached, seq.num_prompt_tokens)
            self.lookup_tokens += seq.num_prompt_tokens
            self.hit_tokens += seq.num_cached_prompt_tokens

    def register(self, seq: Sequence) -> None:
        """Names seq's blocks that are now full and computed (called after each step)."""
        chain = seq.chain
        if not self.enabled or chain is None:
            return
        bs, computed = self.pool.block_size, seq.num_cached_tokens
        i = chain.num_registered
        while i < computed // bs and (not seq.segments or chain.content_end(seq, i, bs) <= computed):
            block = seq.block_table[i]
            if self.pool.name_of(block) is None:
                self.pool.register(block, chain.name(seq, i, bs))
            i += 1
        chain.num_registered = i
