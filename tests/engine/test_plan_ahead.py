"""Planning step N+1 while step N runs, on CPU: the guessed page table is the real one
in steady decoding (block boundaries included), FlashInferBackend reuses a plan made
ahead only for an equal page table, and the CUDA step path (CudaRunner, run here on
CPU over a torch stand-in for flashinfer that attends from exactly what was planned)
gives the CPU engine's tokens while most steps use a plan made ahead."""
from __future__ import annotations

import pytest
import torch

from engine.attention.flashinfer_backend import FlashInferBackend, PageTable
from engine.cuda_runner import CudaRunner
from engine.llm_engine import EngineConfig, LLMEngine
from engine.plan_ahead import predict_next_decode
from engine.sampling_params import SamplingParams
from engine.checkpoints.tiny_text import make_tiny
from tests.engine import fake_flashinfer

pytestmark = pytest.mark.timeout(180)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], list(range(10, 19)), [20]]
MAX_NEW = [12, 7, 20, 9]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return str(make_tiny("qwen3", tmp_path_factory.mktemp("plan-ahead")))


def _engine(ckpt, **kw) -> LLMEngine:
    return LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, block_size=4, num_blocks=64, **kw))


def _record_guesses(engine: LLMEngine) -> list:
    """Wraps the runner: per step, (the step's page table, the guess made for the next)."""
    records, real_run, pool = [], engine.runner.run, engine.scheduler.pool

    def run(batch, pool_):
        table = PageTable.of(engine.runner.prepare(batch, pool_)[2])
        out = real_run(batch, pool_)
        guess = predict_next_decode(batch, pool, engine.config.block_size)
        records.append((table, None if guess is None else PageTable.of(guess)))
        return out

    engine.runner.run = run
    return records


def test_guesses_match_the_next_step_in_steady_decoding(ckpt):
    engine = _engine(ckpt)
    records = _record_guesses(engine)
    engine.generate(PROMPTS, [SamplingParams(max_new_tokens=n) for n in MAX_NEW])
    guessed = [(guess, nxt) for (_, guess), (nxt, _) in zip(records, records[1:]) if guess is not None]
    # every step but the last continues the one before (no EOS, all admitted at once)
    assert len(guessed) == len(records) - 1
    assert all(guess.same_as(nxt) for guess, nxt in guessed)
    assert records[-1][1] is None  # the last sequence stops by length: nothing to guess


def test_no_guess_while_prefill_chunks_remain(ckpt):
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, block_size=4, num_blocks=64,
                                                    prefill_chunk_size=4))
    records = _record_guesses(engine)
    engine.generate([list(range(1, 11))], SamplingParams(max_new_tokens=3))
    assert [guess is None for _, guess in records] == [True, True, False, False, True]


def _meta(engine, prompts, steps: int):
    """Host metadata of the step after `steps` steps of generating `prompts`."""
    for i, p in enumerate(prompts):
        engine.add_request(f"m{i}", p, SamplingParams(max_new_tokens=30))
    for _ in range(steps):
        engine.step()
    return engine.runner.prepare(engine.scheduler.schedule(), engine.scheduler.pool)[2]


def test_backend_reuses_a_plan_made_ahead_only_for_an_equal_page_table(ckpt, monkeypatch):
    fake_flashinfer.install(monkeypatch)
    backend = FlashInferBackend(4, 2, 16, torch.float32, device="cpu")
    a = _meta(_engine(ckpt), PROMPTS, 0)  # a prefill step
    b = _meta(_engine(ckpt), PROMPTS, 2)  # a decode step
    b_again = _meta(_engine(ckpt), PROMPTS, 2)
    c = _meta(_engine(ckpt), PROMPTS[:2], 3)
    first = backend.plan(a)
    assert first.wrapper is backend._sets[0].prefill and backend.prepare(a) is first
    backend.plan_ahead(b)  # while step a runs: the other wrapper set
    assert backend._sets[1].decode.num_plans == 1
    second = backend.plan(b_again)  # an equal page table, another metadata object: reused
    assert second.wrapper is backend._sets[1].decode and second.meta is b_again
    assert (backend.num_plans, backend.num_reused) == (2, 1)
    backend.plan_ahead(b)
    assert backend._sets[0].decode.num_plans == 1  # ahead of step 2 (set 1 in flight): set 0
    third = backend.plan(c)  # the guess was wrong: planned now
    assert (backend.num_plans, backend.num_reused) == (4, 1)
    assert third.wrapper is backend._sets[0].decode and third.wrapper.table[2].tolist() == \
        PageTable.of(c).indices.long().tolist()
    assert backend.prepare(c) is third and backend.prepare(b) is not third  # b: planned anew


def _cuda_path_on_cpu(engine: LLMEngine) -> FlashInferBackend:
    engine.runner.cuda = CudaRunner(engine.runner, [])
    backend = FlashInferBackend.for_config(engine.model.config, "cpu", torch.float32)
    engine.model.set_attention_backend(backend)
    return backend


def _staggered(engine: LLMEngine) -> dict[str, list[int]]:
    """Requests join at different steps (so some guesses miss); returns their outputs."""
    arrivals = {0: [0, 1], 3: [2], 9: [3]}
    outputs, step = {}, 0
    while step <= max(arrivals) or engine.has_work():
        for i in arrivals.get(step, []):
            engine.add_request(f"r{i}", PROMPTS[i], SamplingParams(max_new_tokens=MAX_NEW[i]))
        for out in engine.step():
            if out.is_finished:
                outputs[out.request_id] = out.output_ids
        step += 1
    return outputs


def test_cuda_step_path_gives_the_cpu_tokens_and_plans_ahead(ckpt, monkeypatch):
    fake_flashinfer.install(monkeypatch)
    expected = _staggered(_engine(ckpt))
    engine = _engine(ckpt)
    backend = _cuda_path_on_cpu(engine)
    assert _staggered(engine) == expected
    steps = engine.num_steps
    assert backend.num_reused >= steps // 2, (backend.num_reused, steps)  # most steps used a plan made ahead
    assert backend.num_plans - backend.num_reused < steps  # and some guesses missed (arrivals)


def test_cuda_step_path_returns_captured_rows_and_embeddings(ckpt, monkeypatch):
    fake_flashinfer.install(monkeypatch)
    kw = dict(capture_layer=1, return_embeddings=True, prefill_chunk_size=4)
    reference, engine = _engine(ckpt, **kw), _engine(ckpt, **kw)
    _cuda_path_on_cpu(engine)
    for e in (reference, engine):
        e.add_request("x", list(range(1, 11)), SamplingParams(max_new_tokens=4))
        e.add_request("y", [5, 6], SamplingParams(max_new_tokens=6))
    while reference.has_work():
        for want, got in zip(reference.step(), engine.step(), strict=True):
            assert (want.request_id, want.token_id) == (got.request_id, got.token_id)
            torch.testing.assert_close(got.hidden, want.hidden, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(got.embeds, want.embeds, atol=0, rtol=0)
    assert not engine.has_work()


class _Rerun:
    """Stands in for a captured CUDA graph on CPU: replay() runs the captured forward
    again (from the static buffers, with the graph's wrapper) into the same outputs."""

    def __init__(self, graphs, size, meta, wrapper, outputs) -> None:
        self.args, self.outputs = (graphs, size, meta, wrapper), outputs

    def replay(self) -> None:
        graphs, size, meta, wrapper = self.args
        with graphs._fixed_plan(meta, wrapper):
            fresh = graphs._forward(size, meta)
        for out, new in zip(self.outputs, fresh):
            if out is not None:
                out.copy_(new)


def _cpu_graphs(engine: LLMEngine, sizes: list[int]):
    """DecodeGraphs on CPU: every step of the graph path but the CUDA capture itself."""
    from engine.cuda_graphs import DecodeGraphs, _Graph

    class Graphs(DecodeGraphs):
        def _capture(self, size):
            meta, wrapper = self._setup(size)
            with self._fixed_plan(meta, wrapper):
                outputs = self._forward(size, meta)
            return _Graph(_Rerun(self, size, meta, wrapper, outputs), wrapper, outputs)

    runner, config = engine.runner, engine.config
    shape = runner.kv_caches[0][0].shape
    runner.kv_caches = [(torch.zeros(shape[0] + 1, *shape[1:]), torch.zeros(shape[0] + 1, *shape[1:]))
                        for _ in runner.kv_caches]  # + the scratch block, as on CUDA
    backend = _cuda_path_on_cpu(engine)
    runner.cuda.graphs = Graphs(engine.model, backend, runner.kv_caches, sizes, config.block_size, config.num_blocks,
                                runner.capture_layer, runner.return_embeddings)
    return runner.cuda.graphs, backend


def test_graph_path_pads_replays_and_drops_padding_rows(ckpt, monkeypatch):
    """Sizes 1 and 2 only: decode steps of 1-2 sequences replay a graph; steps of 3-4
    sequences and prefills run eagerly, with plans made ahead."""
    fake_flashinfer.install(monkeypatch)
    expected = _staggered(_engine(ckpt))
    engine = _engine(ckpt)
    graphs, backend = _cpu_graphs(engine, [1, 2])
    assert _staggered(engine) == expected
    assert graphs.num_replays > 0 and backend.num_reused > 0


def test_graph_path_with_padding_and_captured_rows(ckpt, monkeypatch):
    """One size of 4: every decode step of 1-3 sequences is padded."""
    fake_flashinfer.install(monkeypatch)
    kw = dict(capture_layer=1, return_embeddings=True)
    reference, engine = _engine(ckpt, **kw), _engine(ckpt, **kw)
    graphs, _ = _cpu_graphs(engine, [4])
    for e in (reference, engine):
        for i in range(3):
            e.add_request(f"r{i}", PROMPTS[i], SamplingParams(max_new_tokens=MAX_NEW[i]))
    while reference.has_work():
        for want, got in zip(reference.step(), engine.step(), strict=True):
            assert (want.request_id, want.token_id) == (got.request_id, got.token_id)
            torch.testing.assert_close(got.hidden, want.hidden, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(got.embeds, want.embeds, atol=0, rtol=0)
    assert graphs.num_replays == engine.num_steps - 1  # all but the first (prefill) step
