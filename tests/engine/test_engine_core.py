"""The one engine step under both engines: the LLM engine and the talker (fed embedding
rows, emitting frames) share EngineCore's step and request index, so a missing request
is the same error in both, and the talker keeps its results through preemption and parking."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument, NotFound
from engine.models.qwen3_omni.tiny import chat_prompt
from engine.engine_config import EngineConfig
from engine.engine_core import EngineCore
from engine.kv_pool import IntegrityError
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.scheduler import SchedulerConfig
from engine.models.qwen3_omni.talker_engine import TalkerEngine
from engine.models.qwen3_omni import THINKER_PART

pytestmark = pytest.mark.timeout(180)

TEXTS = ("Hello there", "abc", "Tell me")


@pytest.fixture(scope="module")
def thinker(tiny_omni):
    return LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(tiny_omni), text_part=THINKER_PART, capture_layer=1,
                                                  return_embeddings=True))


@pytest.fixture(scope="module")
def rows(thinker):
    """Per text: the thinker's input rows, one tensor per step (prompt rows first)."""
    out = {}
    for text in TEXTS:
        params = SamplingParams(max_new_tokens=10, eos_token_ids=thinker.model.config.eos_token_ids)
        thinker.add_request(text, chat_prompt(text), params)
        out[text] = []
        while thinker.has_work():
            out[text] += [o.embeds for o in thinker.step()]
    return out


def talker(ckpt, num_blocks: int) -> TalkerEngine:
    return TalkerEngine.from_checkpoint(EngineConfig(checkpoint=str(ckpt), num_blocks=num_blocks, block_size=4))


def test_engine_config_validates_the_sizes_once():
    config = EngineConfig(num_blocks=8, block_size=4, max_num_seqs=2)
    assert config.scheduler_config == SchedulerConfig(num_blocks=8, block_size=4, max_num_seqs=2,
                                                      max_num_batched_tokens=2048, prefill_chunk_size=512)
    for name, value in [("num_blocks", 0), ("block_size", -1), ("max_num_seqs", True),
                        ("max_num_batched_tokens", 1.5), ("prefill_chunk_size", 0)]:
        with pytest.raises(InvalidArgument, match=f"{name} must be > 0"):
            EngineConfig(**{name: value})


def test_both_engines_run_the_core_step(thinker, tiny_omni):
    engine = talker(tiny_omni, 64)
    assert isinstance(thinker, EngineCore) and isinstance(engine, EngineCore)
    assert type(thinker).step is EngineCore.step  # the talker only adds its queued failures around it


def test_a_missing_request_is_not_found_in_both_engines(thinker, tiny_omni):
    engine = talker(tiny_omni, 64)
    for call in (lambda: thinker.park("zz"), lambda: thinker.unpark("zz"), lambda: engine.park("zz"),
                 lambda: engine.unpark("zz"), lambda: engine.end_thinker("zz"),
                 lambda: engine.push_thinker("zz", torch.zeros(1, engine.spec.thinker_hidden_size))):
        with pytest.raises(NotFound, match="'zz'"):
            call()
    thinker.abort("zz"), engine.abort("zz")  # aborting what is not there is a no-op in both
    params = SamplingParams(max_new_tokens=2)
    thinker.add_request("dup", [1, 2], params)
    with pytest.raises(InvalidArgument, match="already"):
        thinker.add_request("dup", [1, 2], params)
    thinker.abort("dup")
    engine.add_request("dup", chat_prompt("hi"), engine.talker_params())
    with pytest.raises(InvalidArgument, match="already"):
        engine.add_request("dup", chat_prompt("hi"), engine.talker_params())


def run(engine: TalkerEngine, rows, streamed: bool) -> dict[str, list[list[int]]]:
    """Every text's frames (sampled, seeded); streamed: one thinker row per talker step."""
    pending = {}
    for i, text in enumerate(TEXTS):
        params = engine.talker_params(max_new_tokens=24, temperature=0.9, seed=i)
        first = rows[text][0] if streamed else torch.cat(rows[text])
        engine.add_request(text, chat_prompt(text), params, embeds=first)
        pending[text] = list(rows[text][1:]) if streamed else []
    frames = {text: [] for text in TEXTS}
    for _ in range(10_000):
        for text in [t for t in pending if t in engine.requests]:
            if pending[text]:
                engine.push_thinker(text, pending[text].pop(0))
            else:
                engine.end_thinker(text)
                del pending[text]
        if not engine.has_work() and not pending:
            break
        for out in engine.step():
            if out.frame is not None:
                frames[out.request_id].append(out.frame)
        engine.check_integrity()
    assert not engine.requests and engine.scheduler.pool.num_free_blocks == engine.scheduler.pool.total
    return frames


def test_the_talker_keeps_its_frames_through_preemption_and_parking(rows, tiny_omni):
    roomy = run(talker(tiny_omni, 256), rows, streamed=False)
    tight = talker(tiny_omni, 14)
    assert run(tight, rows, streamed=True) == roomy
    assert tight.scheduler.num_preemptions > 0 and all(roomy.values())


def test_talker_integrity_check_catches_a_sequence_without_its_request(rows, tiny_omni):
    engine = talker(tiny_omni, 64)
    engine.add_request("a", chat_prompt("Hello there"), engine.talker_params(max_new_tokens=8),
                       embeds=torch.cat(rows["Hello there"]))
    engine.check_integrity()
    assert engine.requests["a"].seq is engine.scheduler.get("a")
    del engine.requests["a"]
    with pytest.raises(IntegrityError, match="scheduler"):
        engine.check_integrity()
