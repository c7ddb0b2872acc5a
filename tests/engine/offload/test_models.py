"""Every engine block stack with DLO on equals resident execution bitwise, for each host
backing, and holds no more than two slots plus its resident weights."""
from __future__ import annotations

import logging

import pytest
import torch

from engine.llm_engine import EngineConfig, LLMEngine
from engine.models.qwen3_omni.code2wav import Code2Wav
from engine.offload.config import OffloadConfig
from engine.offload.loading import set_process_config
from engine.offload.memory import param_bytes, weight_bytes
from engine.sampling_params import SamplingParams
from engine.checkpoints.tiny_text import make_tiny
from engine.models.qwen3_omni.tiny import chat_prompt
from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner

pytestmark = pytest.mark.timeout(240)
BACKINGS = ("tensors", "mmap", "cache")
PROMPTS = [[5, 9, 200, 17, 3, 44], [7, 7, 1]]


def config(backing: str, root) -> OffloadConfig:
    return OffloadConfig(enabled=True, host_backing=backing, host_cache_root=str(root) if backing == "cache" else "")


def check_memory(model, resident_model) -> None:
    """Weights outside host backing <= 2 slots + the resident (not streamed) parameters."""
    backend = model.offload_backend
    resident = param_bytes(resident_model, exclude=backend.plan.streamed_names)
    assert weight_bytes(model, backend) <= 2 * backend.plan.slot_bytes + resident
    assert len(backend.slot_tensors()) == 2
    backend.check_integrity()


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return str(make_tiny("qwen3", tmp_path_factory.mktemp("dlo-qwen3"), num_hidden_layers=4))


@pytest.fixture
def process_offload():
    yield set_process_config
    set_process_config(None)


def greedy(checkpoint: str):
    engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=checkpoint, num_blocks=64))
    logits, sample = [], engine.sampler
    engine.sampler = lambda rows, seqs: logits.append(rows.clone()) or sample(rows, seqs)
    ids = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6))
    return ids, logits, engine.model


@pytest.mark.parametrize("backing", BACKINGS)
def test_thinker_greedy_ids_and_logits(qwen3, backing, tmp_path, process_offload, caplog):
    ids, logits, resident = greedy(qwen3)
    process_offload(config(backing, tmp_path))
    with caplog.at_level(logging.INFO, logger="engine.offload"):
        got_ids, got_logits, model = greedy(qwen3)
    assert got_ids == ids
    assert len(got_logits) == len(logits) and all(torch.equal(a, b) for a, b in zip(logits, got_logits))
    assert model.offload_backend.host_kind == {"tensors": "tensors", "mmap": "checkpoint_mmap",
                                               "cache": "host_weight_cache"}[backing]
    assert model.offload_backend.stats.misses == 0
    check_memory(model, resident)


@pytest.fixture(scope="module")
def speech_resident(tiny_omni):
    return _speak(tiny_omni)


def _speak(checkpoint):
    runner = SpeechRunner.from_checkpoint(str(checkpoint), num_blocks=64)
    request = SpeechRequest("r", chat_prompt("abc"), max_text_tokens=8, max_frames=12, chunk_size=6, left_context=2)
    return runner.generate([request])[0], runner


@pytest.mark.parametrize("backing", BACKINGS)
def test_talker_and_code2wav_in_the_speech_runner(tiny_omni, speech_resident, backing, tmp_path, process_offload,
                                                  caplog):
    expected, resident = speech_resident
    process_offload(config(backing, tmp_path))
    with caplog.at_level(logging.INFO, logger="engine.offload"):
        got, runner = _speak(tiny_omni)
    assert got.text_ids == expected.text_ids
    assert torch.equal(got.codes, expected.codes) and torch.equal(got.audio, expected.audio)
    for model, reference in ((runner.thinker.model, resident.thinker.model),
                             (runner.talker.model, resident.talker.model), (runner.code2wav, resident.code2wav)):
        assert model.offload_backend.stats.blocks_run > 0
        check_memory(model, reference)
    if backing == "mmap":  # MoE experts are stacked from per-expert tensors: no single source
        assert runner.talker.model.offload_backend.host_kind == "tensors"
        assert runner.code2wav.offload_backend.host_kind == "checkpoint_mmap"
        assert "preflight failed" in caplog.text and "loading the streamed weights ordinarily" in caplog.text


@pytest.mark.parametrize("backing", BACKINGS)
def test_code2wav_with_resident_layers(tiny_omni, backing, tmp_path):
    codes = torch.randint(0, 64, (2, 4, 9), generator=torch.Generator().manual_seed(3))
    resident = Code2Wav.from_checkpoint(tiny_omni)
    model = Code2Wav.from_checkpoint(tiny_omni, offload=OffloadConfig(
        enabled=True, resident_layers=1, host_backing=backing,
        host_cache_root=str(tmp_path) if backing == "cache" else ""))
    assert model.offload_backend.plan.resident_blocks == ("pre_transformer.layers.0",)
    for _ in range(2):
        assert torch.equal(model(codes), resident(codes))
    check_memory(model, resident)
    model.offload_backend.disable()
