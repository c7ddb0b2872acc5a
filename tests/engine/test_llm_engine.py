"""The engine over a real tiny checkpoint: continuous batching gives each request its
solo result, preemption changes nothing, seeded sampling ignores the batch, bad input
is a clear error."""
import random

import pytest

from engine.llm_engine import EngineConfig, LLMEngine
from engine.sampling_params import SamplingParams
from engine.checkpoints.tiny_text import make_tiny
from core.errors import InvalidArgument
from tests.engine.slots import slots

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return str(make_tiny("qwen3", tmp_path_factory.mktemp("engine-qwen3"), max_position_embeddings=512))


class Recorder:
    """Wraps the engine's real sampler: remembers each request's top-2 logit margins."""

    def __init__(self, sampler) -> None:
        self.sampler, self.margins = sampler, {}

    def __call__(self, logits, seqs):
        top = logits.topk(2, dim=-1).values
        for seq, (a, b) in zip(seqs, top.tolist()):
            self.margins.setdefault(seq.request_id, []).append(a - b)
        return self.sampler(logits, seqs)


def solo(ckpt, prompt, n, **kw):
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, **kw))
    engine.sampler = Recorder(engine.sampler)
    out = engine.generate([prompt], SamplingParams(max_new_tokens=n))[0]
    return out, next(iter(engine.sampler.margins.values()))


def run_staggered(engine, requests, arrivals):
    """Adds request i at step arrivals[i]; returns {request_id: output ids}."""
    outputs, step = {}, 0
    pending = sorted(range(len(requests)), key=lambda i: arrivals[i])
    while pending or engine.has_work():
        while pending and arrivals[pending[0]] <= step:
            i = pending.pop(0)
            engine.add_request(f"r{i}", requests[i][0], requests[i][1])
        for out in engine.step():
            if out.is_finished:
                outputs[out.request_id] = out.output_ids
        engine.check_integrity()
        step += 1
    return outputs


def assert_same_as_solo(ckpt, requests, outputs):
    for i, (prompt, params) in enumerate(requests):
        expected, margins = solo(ckpt, prompt, params.max_new_tokens)
        got = outputs[f"r{i}"]
        diverged = next((k for k, (a, b) in enumerate(zip(got, expected)) if a != b), None)
        if diverged is not None:  # allowed only right after a near-tie in the solo run
            assert min(margins[: diverged + 1]) < 1e-5, (i, got, expected)
        else:
            assert got == expected, i


def workload(n=12, seed=0):
    rng = random.Random(seed)
    return [([rng.randrange(1, 256) for _ in range(rng.randint(1, 40))], SamplingParams(max_new_tokens=rng.randint(1, 20)))
            for _ in range(n)]


def test_requests_arriving_at_different_steps_get_their_solo_ids(ckpt):
    requests = workload()
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, block_size=4, prefill_chunk_size=16,
                                                    max_num_batched_tokens=48))
    check_prepare(engine.runner)
    outputs = run_staggered(engine, requests, [random.Random(1).randint(0, 15) for _ in requests])
    assert_same_as_solo(ckpt, requests, outputs)
    assert engine.scheduler.pool.num_free_blocks == engine.scheduler.pool.total


def check_prepare(runner):
    """Wraps runner.prepare: every step's inputs must equal a per-token build of them."""
    prepare = runner.prepare

    def checked(batch, pool):
        ids, positions, meta = prepare(batch, pool)
        want_ids, want_pos, want_slots = [], [], []
        for seq, n in zip(batch.seqs, batch.num_query_tokens):
            first = seq.num_cached_tokens
            want_ids += seq.token_ids[first:first + n]
            want_pos += range(first, first + n)
            want_slots += slots(pool, seq, first, first + n)
        assert ids.tolist() == want_ids and positions.tolist() == want_pos
        assert meta.slot_mapping.tolist() == want_slots
        assert meta.seq_lens.tolist() == [s.num_cached_tokens + n for s, n in zip(batch.seqs, batch.num_query_tokens)]
        width = meta.block_tables.shape[1]
        assert meta.block_tables.tolist() == [s.block_table + [-1] * (width - len(s.block_table)) for s in batch.seqs]
        return ids, positions, meta

    runner.prepare = checked


def test_a_tiny_pool_preempts_and_changes_nothing(ckpt):
    requests = workload(seed=2)
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, block_size=4, num_blocks=24))
    check_prepare(engine.runner)
    outputs = run_staggered(engine, requests, [0] * len(requests))
    assert engine.scheduler.num_preemptions > 0  # the pool really ran out
    assert_same_as_solo(ckpt, requests, outputs)
    assert engine.scheduler.pool.num_free_blocks == engine.scheduler.pool.total


def test_seeded_sampling_ignores_the_batch(ckpt):
    params = SamplingParams(max_new_tokens=12, temperature=0.9, top_p=0.9, top_k=50, seed=1234)
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt))
    alone = engine.generate([[4, 8, 15, 16]], params)[0]
    others = [([7] * k, SamplingParams(max_new_tokens=9, temperature=1.0)) for k in range(1, 6)]
    outputs = run_staggered(engine, others[:2] + [([4, 8, 15, 16], params)] + others[2:], [0, 0, 3, 1, 2, 5, 4])
    assert outputs["r2"] == alone


@pytest.mark.parametrize("prompt, params, message", [
    ([], SamplingParams(max_new_tokens=4), "prompt is empty"),
    ([1, 256], SamplingParams(max_new_tokens=4), "vocab size"),
    ([1, 2], SamplingParams(max_new_tokens=10_000), "context"),
])
def test_bad_requests_are_clear_errors(ckpt, prompt, params, message):
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt))
    with pytest.raises(InvalidArgument, match=message):
        engine.add_request("bad", prompt, params)
    with pytest.raises(InvalidArgument, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
    assert engine.generate([[1, 2]], SamplingParams(max_new_tokens=3))[0]  # and it still serves


def test_bad_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(InvalidArgument, match="does not exist"):
        LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(tmp_path / "missing")))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="config.json"):
        LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(tmp_path)))
