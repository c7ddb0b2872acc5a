"""The talker as a real gRPC service: thinker rows opened and pushed give the in-process
runner's frames (which equal transformers'); bad input is INVALID_ARGUMENT naming the
field, and the service keeps serving."""
from __future__ import annotations

import pytest
import torch

from engine.llm_engine import EngineConfig, LLMEngine
from engine.sampling_params import SamplingParams
from engine.models.qwen3_omni.tiny import chat_prompt
from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode, PushChunk, Release, StreamInput
from services.qwen3_omni.talker import TalkerComponent
from tests.fixtures import registry
from tests.fixtures.services import RunStream, start_in_process
from transport.codec import inline_ref
from transport.config import TransportConfig
from transport.transport import Transport
from engine.models.qwen3_omni import THINKER_PART

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def talker(tiny_omni):
    server = start_in_process(TalkerComponent.from_checkpoint(str(tiny_omni)))
    registry.register(server.address, server.hosted.transport.arena_name)
    yield server
    registry.unregister(server.address)
    server.stop()


@pytest.fixture(scope="module")
def thinker(tiny_omni):
    return LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(tiny_omni), text_part=THINKER_PART, capture_layer=1,
                                                  return_embeddings=True))


@pytest.fixture
def consumer():
    transport = Transport(TransportConfig(host_id="test-host"))
    yield transport
    transport.close()


def thinker_rows(thinker: LLMEngine, prompt: list[int], max_text: int) -> list[torch.Tensor]:
    """The thinker's input embeddings, one tensor per step (prompt rows first)."""
    params = SamplingParams(max_new_tokens=max_text, eos_token_ids=thinker.model.config.eos_token_ids)
    thinker.add_request("rows", prompt, params)
    rows = []
    while thinker.has_work():
        rows += [o.embeds for o in thinker.step()]
    return rows


def open_talker(rid: str, prompt: list[int], embeds: torch.Tensor, **params) -> OpenNode:
    inputs = {"prompt_ids": inline_ref(torch.tensor(prompt)), "prompt_embeds": inline_ref(embeds)}
    return OpenNode(request_id=rid, node="talker", iteration=(0,), inputs=inputs, params=params,
                    stream=StreamInput("thinker", continue_after_producer_done=True))


def collect(stream: RunStream, consumer: Transport, rid: str) -> tuple[list[list[int]], NodeError | None]:
    frames = []
    while True:
        for ev in stream.events(timeout_s=60):
            if ev.request_id != rid:
                continue
            if isinstance(ev, NodeOutput):
                ref = ev.tensors["codes"]
                resolved = consumer.resolve(ref)
                frames.append(resolved.tensor.reshape(-1).tolist())
                resolved.close()
                if ref.kind == "shm":
                    stream.send(Release(rid, (ref.lease_id,)))
            elif isinstance(ev, NodeDone):
                return frames, None
            elif isinstance(ev, NodeError):
                return frames, ev


def test_streamed_thinker_rows_give_the_runner_frames(talker, thinker, tiny_omni, consumer):
    prompt = chat_prompt("Hello there")
    expected = SpeechRunner.from_checkpoint(str(tiny_omni)).generate(
        [SpeechRequest("ref", prompt, max_text_tokens=12, max_frames=30)])[0]
    rows = thinker_rows(thinker, prompt, 12)
    with RunStream(talker.address) as stream:
        stream.send(open_talker("t1", prompt, rows[0], max_frames=30))
        for row in rows[1:]:
            stream.send(PushChunk("t1", "talker", "thinker", (0,), {"embeds": inline_ref(row)}))
        stream.send(PushChunk("t1", "talker", "thinker", (0,), end_of_stream=True))
        frames, error = collect(stream, consumer, "t1")
    assert error is None
    assert frames == expected.frames


BAD = {
    "embeds width": (lambda p, e: (p, e[:, :10]), {}, "width"),
    "no assistant turn": (lambda p, e: (p[:-3], e[:-3]), {}, "assistant"),
    "speaker": (lambda p, e: (p, e), {"speaker": "nobody"}, "speaker"),
    "max_frames": (lambda p, e: (p, e), {"max_frames": 2.5}, "params.max_frames"),
    "talker_temperature": (lambda p, e: (p, e), {"talker_temperature": -1.0}, "temperature"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_invalid_argument_and_the_service_keeps_serving(case, talker, thinker, consumer):
    prompt = chat_prompt("hi")
    rows = thinker_rows(thinker, prompt, 6)
    change, params, words = BAD[case]
    bad_prompt, bad_embeds = change(prompt, rows[0])
    with RunStream(talker.address) as stream:
        stream.send(open_talker("bad", bad_prompt, bad_embeds, **params))
        _, error = collect(stream, consumer, "bad")
        assert error is not None and error.status == "INVALID_ARGUMENT", error
        assert words in error.message
        stream.send(open_talker("good", prompt, torch.cat(rows), max_frames=4))
        stream.send(PushChunk("good", "talker", "thinker", (0,), end_of_stream=True))
        frames, error = collect(stream, consumer, "good")
    assert error is None and len(frames) == 3
