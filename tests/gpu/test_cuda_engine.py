"""The thinker engine on a CUDA device (run with `pytest -m gpu tests/gpu`, or
scripts/gpu_check.sh): the same greedy tokens and close logits as the CPU engine, with
the torch backend (fp32) and with FlashInfer (fp16) with and without CUDA graphs, and
FlashInfer against the torch backend on the same GPU.

Comparisons stop at a request's first near tie of the reference's top two logits: past
it the two engines may legitimately pick different tokens."""
from __future__ import annotations

import pytest
import torch

from engine.attention.torch_backend import TorchAttentionBackend
from engine.llm_engine import EngineConfig, LLMEngine
from engine.sampling_params import SamplingParams
from engine.checkpoints.tiny_text import make_tiny

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(900),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PROMPTS = [[1, 2, 3], list(range(4, 40)), [9] * 17, list(range(50, 55)), [200, 100]]
MAX_NEW = [24, 9, 30, 16, 40]
ARRIVALS = [0, 0, 2, 5, 11]  # later joins make mixed prefill + decode steps between decode-only ones


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """head_dim 64 (a size every FlashInfer build has), 2 query heads per KV head."""
    return str(make_tiny("qwen3", tmp_path_factory.mktemp("gpu-qwen3"), head_dim=64))


@pytest.fixture(scope="module")
def ckpt_gqa3(tmp_path_factory):
    """3 query heads per KV head: FlashInfer's tensor-core decode kernels."""
    return str(make_tiny("qwen3", tmp_path_factory.mktemp("gpu-qwen3-gqa3"), head_dim=64,
                         num_attention_heads=6, num_key_value_heads=2))


class Recorder:
    """Wraps the engine's sampler: keeps every sampled row's logits (host fp32) per request."""

    def __init__(self, sampler) -> None:
        self.sampler, self.logits = sampler, {}

    def __call__(self, logits, seqs):
        for seq, row in zip(seqs, logits):
            self.logits.setdefault(seq.request_id, []).append(row.float().cpu().clone())
        return self.sampler(logits, seqs)


def run(engine: LLMEngine) -> tuple[dict, dict]:
    """PROMPTS joined at ARRIVALS -> ({request: output ids}, {request: [logits per step]})."""
    engine.sampler = Recorder(engine.sampler)
    outputs, step = {}, 0
    while step <= max(ARRIVALS) or engine.has_work():
        for i, at in enumerate(ARRIVALS):
            if at == step:
                engine.add_request(f"r{i}", PROMPTS[i], SamplingParams(max_new_tokens=MAX_NEW[i]))
        for out in engine.step():
            if out.is_finished:
                outputs[out.request_id] = out.output_ids
        step += 1
    return outputs, engine.sampler.logits


def engine(ckpt: str, device: str = "cuda", dtype: str | None = None, **kw) -> LLMEngine:
    return LLMEngine.from_checkpoint(EngineConfig(checkpoint=ckpt, device=device, dtype=dtype, block_size=16,
                                                  num_blocks=64, max_num_seqs=8, prefill_chunk_size=16, **kw))


def assert_same(reference: tuple, got: tuple, atol: float) -> None:
    ref_ids, ref_logits = reference
    got_ids, got_logits = got
    assert sorted(got_ids) == sorted(ref_ids)
    for rid, rows in ref_logits.items():
        for step, (want, have) in enumerate(zip(rows, got_logits[rid])):
            torch.testing.assert_close(have, want, atol=atol, rtol=0, msg=lambda m: f"{rid} step {step}: {m}")
            top = want.topk(2).values
            if float(top[0] - top[1]) < 2 * atol:
                break  # a near tie: the rest of this request may differ
            assert int(have.argmax()) == int(want.argmax()), (rid, step)
            assert got_ids[rid][step] == ref_ids[rid][step], (rid, step)


def test_fp32_on_cuda_runs_the_torch_backend_and_matches_cpu(ckpt):
    cuda = engine(ckpt)
    assert cuda.model.attn_backend.name == "torch" and cuda.runner.cuda.graphs is None  # FlashInfer: fp16/bf16
    assert cuda.runner.kv_caches[0][0].is_cuda and next(cuda.model.parameters()).is_cuda
    assert_same(run(engine(ckpt, device="cpu")), run(cuda), atol=1e-4)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_fp16_flashinfer_on_cuda_matches_cpu(ckpt, graphs):
    pytest.importorskip("flashinfer")
    cuda = engine(ckpt, dtype="float16", cuda_graphs=graphs)
    backend = cuda.model.attn_backend
    assert backend.name == "flashinfer"
    assert (cuda.runner.cuda.graphs is not None) == graphs
    assert_same(run(engine(ckpt, device="cpu")), run(cuda), atol=3e-2)
    if graphs:
        assert cuda.runner.cuda.graphs.num_replays > 0
    else:
        assert backend.num_reused > 0  # steps that used the plan made while the step before ran


def test_graphs_match_eager_flashinfer(ckpt):
    pytest.importorskip("flashinfer")
    eager, graphs = engine(ckpt, dtype="float16", cuda_graphs=False), engine(ckpt, dtype="float16")
    assert_same(run(eager), run(graphs), atol=1e-2)


@pytest.mark.parametrize("which", ["ckpt", "ckpt_gqa3"])
def test_flashinfer_matches_the_torch_backend_on_cuda(which, request):
    pytest.importorskip("flashinfer")
    path = request.getfixturevalue(which)
    flashinfer = engine(path, dtype="float16", cuda_graphs=False)
    torch_backend = engine(path, dtype="float16", cuda_graphs=False)
    torch_backend.model.set_attention_backend(TorchAttentionBackend(zero_padding=False, reuse_buffers=True))
    assert flashinfer.model.attn_backend.name == "flashinfer"
    assert_same(run(torch_backend), run(flashinfer), atol=1e-2)


def test_padded_graph_batches_equal_solo_runs(ckpt):
    """3 sequences replay the 4-row graph: the padding row must not disturb them."""
    pytest.importorskip("flashinfer")
    prompts, params = PROMPTS[:3], SamplingParams(max_new_tokens=12)
    batched = engine(ckpt, dtype="float16")
    together = batched.generate(prompts, params)
    assert batched.runner.cuda.graphs.num_replays > 0
    for prompt, got in zip(prompts, together):
        assert engine(ckpt, dtype="float16", cuda_graphs=False).generate([prompt], params)[0] == got


def test_thinker_component_loads_on_cuda(ckpt):
    from services.thinker.component import ThinkerComponent

    component = ThinkerComponent.from_checkpoint(ckpt, device="cuda", num_blocks=64)
    assert component.engine.runner.kv_caches[0][0].is_cuda
    assert component.engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=4))[0]
