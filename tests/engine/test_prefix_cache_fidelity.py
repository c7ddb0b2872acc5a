"""Prefix caching changes no output: on tiny checkpoints whose every weight is random (two
configurations each), greedy ids are identical and logits within fp32 tolerance with the
cache cold, warm and partly evicted, against an engine with the cache off; for the text
LLM engine and the Orpheus LM (the same engine, the Orpheus vocabulary). The cache really
works: a warm prompt computes fewer prompt tokens (counted), and nothing leaks."""
from __future__ import annotations

import random

import pytest

from engine.checkpoints.tiny_text import LLAMA3_ROPE, make_tiny
from engine.llm_engine import EngineConfig, LLMEngine
from engine.models.orpheus.prompt import speech_prompt_ids
from engine.sampling_params import SamplingParams
from tests.engine.prefix_workload import assert_same, randomize, recording, run, shared_prompts
from tests.fixtures.tiny_orpheus import checkpoint as orpheus_checkpoint

pytestmark = pytest.mark.timeout(300)

TEXT_CONFIGS = {
    "qwen3": ("qwen3", {}),
    "llama_wide": ("llama", dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3, head_dim=8,
                                 num_hidden_layers=3, tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE)),
}
PARAMS = SamplingParams(max_new_tokens=6)


@pytest.fixture(scope="module", params=sorted(TEXT_CONFIGS))
def text_ckpt(request, tmp_path_factory):
    family, overrides = TEXT_CONFIGS[request.param]
    seed = sorted(TEXT_CONFIGS).index(request.param) + 1
    return str(make_tiny(family, tmp_path_factory.mktemp(request.param), seed=seed, **overrides)), seed


def engine(ckpt: str, seed: int, **kw) -> LLMEngine:
    e = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, **{"block_size": 4, **kw}))
    randomize(e.model, seed)
    return recording(e)


def cold_warm_evicted(ckpt: str, seed: int, prompts: list[list[int]], filler: list[list[int]], num_blocks: int):
    """The reference (cache off), then one cached engine: cold, warm, and after filler
    prompts evicted part of what it cached."""
    named = {f"p{i}": p for i, p in enumerate(prompts)}
    ref = run(engine(ckpt, seed, prefix_cache=False, num_blocks=256), named, PARAMS)
    cached = engine(ckpt, seed, num_blocks=num_blocks, prefill_chunk_size=16)
    pool = cached.scheduler.pool
    cold = run(cached, named, PARAMS)
    computed_cold = cached.num_prefill_tokens
    warm = run(cached, named, PARAMS)
    computed_warm = cached.num_prefill_tokens - computed_cold
    assert computed_warm < computed_cold  # the second pass reused blocks
    assert all(warm[r].num_cached_prompt_tokens > 0 for r in named if len(named[r]) > 4)
    evicted_before = pool.num_evicted
    run(cached, {f"f{i}": p for i, p in enumerate(filler)}, PARAMS)
    assert pool.num_evicted > evicted_before  # the filler pushed cached blocks out
    partly = run(cached, named, PARAMS)
    assert pool.num_used_blocks == 0 and not cached.has_work()  # nothing leaked
    pool.check_integrity([])
    return ref, cold, warm, partly


def test_text_engine_outputs_are_unchanged_by_the_cache(text_ckpt):
    ckpt, seed = text_ckpt
    prompts = shared_prompts(8, seed)
    filler = shared_prompts(6, seed + 100)
    ref, cold, warm, partly = cold_warm_evicted(ckpt, seed, prompts, filler, num_blocks=48)
    for rid in ref:
        for run_ in (cold, warm, partly):
            assert_same(ref[rid], run_[rid])


def test_a_shared_prefix_is_computed_once(text_ckpt):
    """The second request with a 33-token shared prefix computes only what follows the
    last full block of it (counted in prompt tokens, not timed)."""
    ckpt, seed = text_ckpt
    e = engine(ckpt, seed, num_blocks=64)
    prefix = [random.Random(seed).randrange(256) for _ in range(33)]
    first = run(e, {"a": prefix + [1, 2, 3]}, PARAMS)["a"]
    assert first.num_cached_prompt_tokens == 0 and e.num_prefill_tokens == 36
    second = run(e, {"b": prefix + [7, 8]}, PARAMS)["b"]
    assert second.num_cached_prompt_tokens == 32  # 8 full blocks of 4
    assert e.num_prefill_tokens == 36 + 3
    stats = e.cache_stats()
    assert stats["prefix_hit_tokens_total"] == 32 and stats["prefix_lookup_tokens_total"] == 36 + 35


def test_cache_off_reuses_nothing(text_ckpt):
    ckpt, seed = text_ckpt
    e = engine(ckpt, seed, num_blocks=64, prefix_cache=False)
    prompt = shared_prompts(1, seed)[0] + [5] * 12
    run(e, {"a": prompt}, PARAMS)
    again = run(e, {"b": prompt}, PARAMS)["b"]
    assert again.num_cached_prompt_tokens == 0 and e.num_prefill_tokens == 2 * len(prompt)
    assert e.scheduler.pool.num_cached_blocks == 0 and e.cache_stats()["prefix_cache_enabled"] == 0.0


@pytest.mark.parametrize("config, seed", [("default", 11), ("wide", 12)])
def test_orpheus_lm_outputs_are_unchanged_by_the_cache(config, seed):
    ckpt = orpheus_checkpoint(config)
    voices = [("tara", "Hello there"), ("tara", "Hello you"), ("leo", "abc"), ("tara", "Hello there, again")]
    prompts = [speech_prompt_ids(ckpt, text, voice) for voice, text in voices]
    filler = [speech_prompt_ids(ckpt, f"filler number {i}", "zoe") for i in range(4)]
    ref, cold, warm, partly = cold_warm_evicted(ckpt, seed, prompts, filler, num_blocks=40)
    for rid in ref:
        for run_ in (cold, warm, partly):
            assert_same(ref[rid], run_[rid])
