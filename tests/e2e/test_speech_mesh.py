"""Qwen3-Omni speech through real services: the mesh equals
the in-process runner split and co-located, concurrent requests keep their solo
results, a cancelled request frees KV blocks and leases, and a dead code2wav fails only
its requests while thinker and talker keep serving."""
from __future__ import annotations

import asyncio

import grpc
import pytest
import torch

from client.speech import speak, speak_stream
from engine.models.qwen3_omni.tiny import chat_prompt
from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner
from tests.e2e.speech_mesh import CHUNK, LEFT, run, start_mesh, stop_mesh
from tests.fixtures import registry
from tests.fixtures.services import describe, wait_until
from tests.fixtures.threads import one_thread

pytestmark = pytest.mark.timeout(300)

PROMPTS = ["Hello there", "abc", "Tell me", "sing"]
PARAMS = {"max_new_tokens": 16, "max_frames": 40}


@pytest.fixture(scope="module")
def mesh(tiny_omni):
    mesh = start_mesh(str(tiny_omni))
    yield mesh
    stop_mesh(mesh)


@pytest.fixture(scope="module")
def expected(tiny_omni):
    runner = SpeechRunner.from_checkpoint(str(tiny_omni))
    reqs = [SpeechRequest(f"ref{i}", chat_prompt(p), max_text_tokens=16, max_frames=40, chunk_size=CHUNK,
                          left_context=LEFT) for i, p in enumerate(PROMPTS)]
    with one_thread():  # as the services run: the audio is compared bit for bit
        return runner.generate(reqs)


def _check(summary, ref) -> None:
    assert summary.text_ids == ref.text_ids
    assert summary.codec_codes == ref.frames
    assert summary.num_chunks == len(ref.chunks)
    audio = torch.cat(summary.chunks)  # bit-exact: the codec's batching never changes a window's audio
    assert audio.shape == ref.audio.shape and torch.equal(audio, ref.audio), (audio - ref.audio).abs().max()


@pytest.mark.parametrize("model", ["omni", "omni-colo"])
def test_mesh_equals_the_inprocess_runner(model, mesh, expected):
    before = dict(mesh.executor(model).num_dispatched)
    summary = run(speak(mesh.conductor.address, model, chat_prompt(PROMPTS[0]), PARAMS))
    _check(summary, expected[0])
    assert summary.ttfa_ms is not None and summary.audio_s > 0
    sent = mesh.executor(model).num_dispatched.get("code2wav", 0) - before.get("code2wav", 0)
    # the talker -> code2wav edge is routed: the talker's runtime feeds code2wav itself (in
    # its own process when co-located, else straight to the codec replica)
    assert sent == 0


@pytest.mark.parametrize("model", ["omni", "omni-colo"])
def test_a_request_asks_for_a_smaller_first_chunk(model, mesh, tiny_omni):
    with one_thread():  # as the services run: the audio is compared bit for bit
        ref = SpeechRunner.from_checkpoint(str(tiny_omni)).generate([SpeechRequest(
            "first", chat_prompt(PROMPTS[1]), max_text_tokens=16, max_frames=40, chunk_size=CHUNK, left_context=LEFT,
            first_chunk=2)])[0]
    summary = run(speak(mesh.conductor.address, model, chat_prompt(PROMPTS[1]), {**PARAMS, "first_chunk": 2}))
    _check(summary, ref)
    assert summary.chunks[0].numel() < summary.chunks[1].numel()  # 2 frames, then C = 8
    with pytest.raises(grpc.aio.AioRpcError, match="first_chunk"):
        run(speak(mesh.conductor.address, model, chat_prompt("hi"), {**PARAMS, "first_chunk": -1}))


@pytest.mark.parametrize("model", ["omni", "omni-colo"])
def test_a_voice_request_gets_the_text_and_audio_and_no_codes(model, mesh, expected):
    """modalities text + audio, as a voice client (and the HTTP gateway's chat) asks: the
    same text and audio, bit for bit; the codec codes stay on the services."""
    ref = expected[2]
    summary = run(speak(mesh.conductor.address, model, chat_prompt(PROMPTS[2]), PARAMS, modalities=("text", "audio")))
    assert summary.text_ids == ref.text_ids and summary.codec_codes == []
    assert torch.equal(torch.cat(summary.chunks), ref.audio)
    with pytest.raises(ValueError, match=r"output_modalities\[1\] is 'codes'"):
        run(speak(mesh.conductor.address, model, chat_prompt(PROMPTS[2]), PARAMS, modalities=("audio", "codes")))


def _batches(address: str, model: str, prompt: str,
             modalities: tuple[str, ...]) -> tuple[list[list[str]], list[int]]:
    """The kinds of each GenerateBatches message of one request, and its text ids."""
    import grpc as grpc_sync

    from client.generate_call import GenerateCall
    from protos.starmesh.v1 import conductor_pb2_grpc

    req = GenerateCall(model, input_ids=tuple(chat_prompt(prompt)), params=PARAMS,
                       output_modalities=modalities).to_proto()
    with grpc_sync.insecure_channel(address) as channel:
        batches = list(conductor_pb2_grpc.ConductorStub(channel).GenerateBatches(req))
    ids = [i for b in batches for ev in b.events if ev.WhichOneof("kind") == "text" for i in ev.text.token_ids]
    return [[ev.WhichOneof("kind") for ev in b.events] for b in batches], ids


@pytest.mark.parametrize("model", ["omni", "omni-colo"])
def test_a_voice_streams_text_travels_with_its_audio(model, mesh, expected):
    """A client that gets audio reads the text as captions: its text deltas come in the
    message of its next audio chunk (or of Usage), at most HELD_TEXT waiting, so the
    burst of thinker tokens costs a message per chunk, not per token; the text is the same."""
    from pipelines.qwen3_omni.model import HELD_TEXT

    ref = expected[3]
    for modalities in (("text", "audio"), ()):  # a voice client, and one that asks for everything
        kinds, ids = _batches(mesh.conductor.address, model, PROMPTS[3], modalities)
        assert ids == ref.text_ids
        assert all(any(k != "text" for k in b) or len(b) >= HELD_TEXT for b in kinds), kinds
        assert sum(k == "text" for b in kinds for k in b) >= len(ref.text_ids)  # a delta per token still
    kinds, ids = _batches(mesh.conductor.address, model, PROMPTS[3], ("text",))  # text alone: nothing waits
    assert ids == ref.text_ids


def test_concurrent_streaming_requests_get_their_solo_results(mesh, expected):
    """Half the requests share one open channel (speak leaves it open), half dial their own."""
    from client.connection import Connection

    async def main():
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(8)]
        async with Connection(mesh.conductor.address).aio_channel() as channel:
            got = await asyncio.gather(*(speak(channel if i < 4 else mesh.conductor.address,
                                               "omni" if i % 2 else "omni-colo", chat_prompt(p), PARAMS)
                                         for i, p in enumerate(prompts)))
            again = await speak(channel, "omni", chat_prompt(PROMPTS[0]), PARAMS)  # still open after eight calls
        return [*got, again]

    *summaries, again = run(main())
    for i, summary in enumerate(summaries):
        _check(summary, expected[i % len(PROMPTS)])
    _check(again, expected[0])


def test_cancel_mid_audio_frees_kv_blocks_and_leases(mesh):
    async def main():
        params = {"max_new_tokens": 16, "max_frames": 200, "min_frames": 200}  # long audio
        async for ev in speak_stream(mesh.conductor.address, "omni", chat_prompt("abc"), params):
            if ev.kind == "audio":
                return True  # leaving the iterator cancels the call mid-audio
        return False

    assert run(main())
    for name in ("thinker", "talker"):
        assert wait_until(lambda: mesh.load(name)["kv_blocks_used"] == 0, 10), mesh.load(name)
    # the leak check after this test verifies every service's arena is empty


def test_dead_code2wav_fails_its_request_and_the_rest_keep_serving(mesh, expected):
    codec = mesh.procs["codec"]

    async def kill_mid_stream():
        params = {"max_new_tokens": 16, "max_frames": 200, "min_frames": 200}
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            async for ev in speak_stream(mesh.conductor.address, "omni", chat_prompt("abc"), params):
                if ev.kind == "audio" and codec.proc.poll() is None:
                    codec.kill()
        return failure.value

    error = run(kill_mid_stream())
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
    # thinker and talker keep serving: the co-located model does not use the codec service
    _check(run(speak(mesh.conductor.address, "omni-colo", chat_prompt(PROMPTS[0]), PARAMS)), expected[0])
    codec.start()  # back on its port (its start sweeps the dead one's arena)
    registry.register(codec.address, describe(codec.address).arena)
    # the conductor's health watch retries with backoff: wait until it sees the codec serve again
    assert wait_until(lambda: not mesh.conductor.hosted.selectors["omni"].unserved(), 30)
    _check(run(speak(mesh.conductor.address, "omni", chat_prompt(PROMPTS[0]), PARAMS)), expected[0])


def _voice(mesh, ids, **params):
    """(text ids, float32 samples, Usage) of one greedy voice request through the conductor."""
    from client.events import AudioChunk, TextDelta, Usage
    from client.generate_call import GenerateCall
    from client.session import ConductorSession

    async def main():
        async with ConductorSession(mesh.conductor.address) as session:
            call = GenerateCall("omni", input_ids=tuple(ids), params={**PARAMS, **params},
                                output_modalities=("text", "audio"))
            text, audio, usage = [], [], None
            async for ev in session.generate(call):
                if isinstance(ev, TextDelta):
                    text += ev.token_ids
                elif isinstance(ev, AudioChunk):
                    audio.append(ev.array())
                elif isinstance(ev, Usage):
                    usage = ev
            return text, audio, usage

    return run(main())


def test_a_continued_voice_turn_equals_the_conversation_resent(mesh):
    """A second turn continued from the first's kept context: the thinker prefills only the
    new turn, and the talker is given the whole conversation's ids and rows, so the text and
    audio equal those of the whole conversation sent again."""
    import numpy as np

    first, second = chat_prompt(PROMPTS[2]), chat_prompt(PROMPTS[3])
    said, _, kept = _voice(mesh, first, keep_context=True)
    text, audio, usage = _voice(mesh, second, context_id=kept.context_id)
    assert usage.cached_prompt_tokens >= len(first) + len(said) - 1
    again_text, again_audio, _ = _voice(mesh, first + said + second)
    assert text == again_text and len(audio) == len(again_audio)
    assert np.array_equal(np.concatenate(audio), np.concatenate(again_audio))
