"""Block names: a router computing core.block_hash.chain_hashes over a text prompt gets the
names the engine registers; fed embedding rows and bidirectional segments are part of a
name (a block holding part of a segment matches only with the whole segment); the pool's
sharing states: least recently used eviction, copy-on-write, refused double release."""
from __future__ import annotations

import pytest
import torch

from core.block_hash import block_hash, chain_hashes, matched_blocks, model_seed, token_bytes
from engine.block_chain import BlockChain
from engine.checkpoints.tiny_text import make_tiny
from engine.kv_pool import IntegrityError, KVPool
from engine.llm_engine import EngineConfig, LLMEngine
from engine.prefix_cache import PrefixCache
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence


def seq(ids, rid="r", embeds=None) -> Sequence:
    return Sequence(rid, list(ids), SamplingParams(max_new_tokens=1), 0, 10_000, 512, embeds)


def test_names_are_deterministic_and_chain_over_everything_before():
    seed = model_seed("m", "adapter")
    assert model_seed("m", "adapter") == seed != model_seed("m", "other") != model_seed("madapter")
    a = chain_hashes(list(range(12)), 4, seed)
    assert len(a) == 3 and all(len(h) == 16 for h in a)
    b = chain_hashes([99] + list(range(1, 12)), 4, seed)
    assert all(x != y for x, y in zip(a, b))  # the first token changes every later name
    assert chain_hashes(list(range(12)), 4, seed, max_blocks=2) == a[:2]
    assert a[1] == block_hash(a[0], token_bytes([4, 5, 6, 7]))
    assert matched_blocks(b[:1] + a[1:], set(a)) == 0 and matched_blocks(a, set(a[:2])) == 2


def test_a_router_names_a_text_prompt_as_the_engine_does(tmp_path):
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(make_tiny("qwen3", tmp_path)), block_size=4))
    prompt = list(range(3, 22))
    engine.generate([prompt], SamplingParams(max_new_tokens=1))
    held = set(engine.cached_block_hashes(100))
    router = chain_hashes(prompt, engine.scheduler.pool.block_size, engine.prefix_seed)
    assert len(router) == 4 and matched_blocks(router, held) == 4
    assert matched_blocks(chain_hashes(prompt, 4, model_seed("another model")), held) == 0


def test_fed_rows_are_part_of_a_name():
    rows = torch.randn(8, 6)
    chain = lambda s: BlockChain(model_seed("m")).name(s, 1, 4)  # noqa: E731
    same, other = rows.clone(), rows.clone()
    other[5, 0] += 1e-3
    assert chain(seq([0] * 8, embeds=rows)) == chain(seq([0] * 8, embeds=same))
    assert chain(seq([0] * 8, embeds=rows)) != chain(seq([0] * 8, embeds=other))
    assert BlockChain(model_seed("m")).name(seq([0] * 8, embeds=rows), 0, 4) == \
        BlockChain(model_seed("m")).name(seq([0] * 8, embeds=other), 0, 4)  # block 0 is before the change


def test_a_block_holding_part_of_a_segment_matches_only_the_whole_segment():
    """Positions 6..9 attend to each other: block 1 (4..7) holds the segment's head, so its
    name covers 8..9 too; a prompt differing at 9 shares block 0 only."""
    pool = KVPool(16, 4)
    a, b = seq(list(range(12)), "a"), seq(list(range(9)) + [50, 10, 11], "b")
    for s in (a, b):
        s.segments, s.chain = ((6, 10),), BlockChain(model_seed("m"))
    pool.allocate(a, 12)
    a.num_cached_tokens = 8  # blocks 0 and 1 computed, the segment's tail not yet
    cache = PrefixCache(pool)
    cache.register(a)
    assert a.chain.num_registered == 1  # block 1 waits for the rest of its segment
    a.num_cached_tokens = 11
    cache.register(a)
    assert a.chain.num_registered == 2
    assert cache.reuse(b) == 4 and b.block_table == a.block_table[:1]
    cache.release(b)
    twin = seq(list(range(12)), "twin")
    twin.segments, twin.chain = ((6, 10),), BlockChain(model_seed("m"))
    assert cache.reuse(twin) == 8  # the whole segment matches: both blocks
    cache.release(twin)
    pool.free(a)
    pool.check_integrity([])


def test_cached_blocks_are_evicted_least_recently_used_and_shared_ones_copied():
    copies = []
    pool = KVPool(4, 2, copy_block=lambda src, dst: copies.append((src, dst)))
    a, b = seq([1, 2, 3, 4], "a"), seq([1, 2, 3, 4], "b")
    pool.allocate(a, 4)
    for i, block in enumerate(a.block_table):
        assert pool.register(block, bytes([i]))
    pool.free(a)  # tail first: block 1 is the least recently used
    assert pool.num_free_blocks == 4 and pool.num_cached_blocks == 2
    assert pool.next_free_blocks(4) == [2, 3, 1, 0]
    pool.take(b, pool.lookup([bytes([0]), bytes([9])]))  # the miss ends the run
    assert b.block_table == [0] and pool.refcount(0) == 1
    c = seq([7] * 6, "c")
    pool.allocate(c, 6)  # two free blocks, then the cached block 1 evicted
    assert c.block_table == [2, 3, 1] and pool.num_evicted == 1 and pool.lookup([bytes([0]), bytes([1])]) == [0]
    d = seq([1, 2, 3], "d")
    pool.take(d, [0])
    d.num_cached_tokens = 1
    pool.free(c)
    pool.allocate(d, 1)  # copy-on-write: b and d share block 0, d gets its own copy
    assert copies == [(0, d.block_table[0])] and pool.refcount(0) == 1 and pool.num_copied == 1
    pool.check_integrity([b.block_table, d.block_table])
    pool.free(b)
    pool.free(d)
    pool.check_integrity([])
    with pytest.raises(IntegrityError, match="holds no reference"):
        pool.decref([0])
