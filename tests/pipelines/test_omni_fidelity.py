"""The in-process thinker -> talker -> code2wav runner against transformers' Qwen3-Omni
generate(return_audio=True) on the tiny checkpoint: same text ids, same codec codes,
waveform allclose (fp32), with the reference's own chunking (C = 300, L = 25)."""
from __future__ import annotations

import time

import pytest
import torch

from engine.models.qwen3_omni.tiny import chat_prompt
from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner
from tests.pipelines.omni_reference import OmniReference

# (prompt text, max text tokens, max frames, extra thinker stop ids): the cases cover the
# thinker stopping by length and by a stop id (the talker then speaks on past its text:
# tts_eos, then tts_pad), and the talker stopping by codec EOS and by length.
CASES = {
    "text_by_length_talker_eos": ("Hello there", 24, 80, ()),
    "text_stops_early": ("Hello there", 24, 80, (26,)),
    "talker_by_length": ("abc", 12, 30, ()),
    "short_text_long_talk": ("Tell me", 6, 40, ()),
}


@pytest.fixture(scope="module")
def reference(tiny_omni):
    return OmniReference(tiny_omni)


@pytest.fixture(scope="module")
def runner(tiny_omni):
    return SpeechRunner.from_checkpoint(str(tiny_omni))


def _request(rid: str, case: str, **kw) -> SpeechRequest:
    text, max_text, max_frames, stop = CASES[case]
    kw = {"chunk_size": 300, "left_context": 25, **kw}  # the reference's chunking unless a test says
    return SpeechRequest(rid, chat_prompt(text), max_text_tokens=max_text, max_frames=max_frames,
                         text_stop_ids=stop, **kw)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers(case, reference, runner, record_property):
    text, max_text, max_frames, stop = CASES[case]
    ref = reference.generate(chat_prompt(text), max_text, max_frames, stop)
    t0 = time.perf_counter()
    ours = runner.generate([_request(case, case)])[0]
    record_property("starmesh_s", time.perf_counter() - t0)
    assert ours.text_ids == ref["text_ids"]
    assert ours.codes.shape == ref["codes"].shape
    assert torch.equal(ours.codes, ref["codes"])
    assert ours.audio.shape == ref["audio"].shape
    torch.testing.assert_close(ours.audio, ref["audio"], atol=1e-4, rtol=0)
    runner.talker.check_integrity()
    assert runner.talker.scheduler.pool.num_free_blocks == runner.talker.scheduler.pool.total


def test_concurrent_requests_each_get_their_solo_codes(runner):
    cases = sorted(CASES)
    reqs = [_request(f"c{i}", cases[i % len(cases)], chunk_size=8, left_context=4) for i in range(8)]
    solo = [runner.generate([r])[0] for r in reqs[:len(cases)]]
    together = runner.generate(reqs)
    for i, r in enumerate(together):
        expected = solo[i % len(cases)]
        assert r.text_ids == expected.text_ids
        assert torch.equal(r.codes, expected.codes), f"request {i} diverged from its solo run"
        torch.testing.assert_close(r.audio, expected.audio, atol=1e-5, rtol=0)
    assert runner.talker.scheduler.pool.num_free_blocks == runner.talker.scheduler.pool.total
    assert runner.thinker.scheduler.pool.num_free_blocks == runner.thinker.scheduler.pool.total


def test_seeded_sampling_is_independent_of_the_batch(runner):
    def req(rid, case):
        return _request(rid, case, text_temperature=0.8, talker_temperature=0.9, seed=7)

    solo = runner.generate([req("s", "talker_by_length")])[0]
    mixed = runner.generate([req("m0", "text_by_length_talker_eos"), req("m1", "talker_by_length"),
                             req("m2", "short_text_long_talk")])[1]
    assert mixed.text_ids == solo.text_ids
    assert torch.equal(mixed.codes, solo.codes)


def test_timed_generate_matches_generate_and_orders_first_audio(runner):
    """The speech benchmark's in-process first-audio clock steps the runner itself: the
    same results as generate, and every request's first audio inside the run."""
    from bench.speech_baselines import timed_generate

    cases = sorted(CASES)
    reqs = [_request(f"t{i}", cases[i % len(cases)], chunk_size=8, left_context=4, first_chunk=2) for i in range(5)]
    plain = runner.generate([_request(f"p{i}", cases[i % len(cases)], chunk_size=8, left_context=4, first_chunk=2)
                             for i in range(5)])
    t0 = time.perf_counter()
    timed, first_ms = timed_generate(runner, reqs)
    total_ms = (time.perf_counter() - t0) * 1e3
    assert [r.request_id for r in timed] == [r.request_id for r in reqs]
    for ours, ref in zip(timed, plain):
        assert ours.text_ids == ref.text_ids
        assert torch.equal(ours.codes, ref.codes)
        assert torch.equal(ours.audio, ref.audio)
    assert len(first_ms) == len(reqs) and all(0 < t <= total_ms for t in first_ms)


def test_a_warm_prefix_cache_changes_nothing(reference, runner):
    """The same request again, its prompt now in both engines' prefix caches: the text ids,
    codes and waveform still equal transformers' (the talker's thinker rows for the cached
    positions come from the rows kept with the blocks)."""
    case = "text_by_length_talker_eos"
    text, max_text, max_frames, stop = CASES[case]
    ref = reference.generate(chat_prompt(text), max_text, max_frames, stop)
    runner.generate([_request("warm-0", case)])
    hits = [e.cache_stats()["prefix_hit_tokens_total"] for e in (runner.thinker, runner.talker)]
    warm = runner.generate([_request("warm-1", case)])[0]
    after = [e.cache_stats()["prefix_hit_tokens_total"] for e in (runner.thinker, runner.talker)]
    assert after[0] > hits[0] and after[1] > hits[1]  # both engines reused blocks
    assert warm.text_ids == ref["text_ids"] and torch.equal(warm.codes, ref["codes"])
    torch.testing.assert_close(warm.audio, ref["audio"], atol=1e-4, rtol=0)
