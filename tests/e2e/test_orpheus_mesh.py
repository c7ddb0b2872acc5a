"""Orpheus through real services (the LM service with its token -> code loop, the codec
service with SNAC, a conductor): streamed audio equals the reference decoder's rule
applied to the same tokens with the `snac` package (same per-window noise), and so does
the in-process runner; concurrent requests keep their solo results; a request without
audio tokens ends with no audio; spoiled windows emit nothing."""
from __future__ import annotations

import asyncio

import pytest
import torch

from client.speech import speak
from engine.models.orpheus.prompt import speech_prompt_ids
from engine.sampling_params import SamplingParams
from pipelines.orpheus.model import orpheus_model, orpheus_placement
from pipelines.orpheus.params import RECOMMENDED
from pipelines.orpheus.runner import OrpheusRunner
from runtime.items import NodeOutput
from runtime.process import ServiceProcess
from tests.fixtures.services import conductor_server_over
from tests.fixtures.tiny_orpheus import checkpoint, num_reference_windows, reference_audio

pytestmark = pytest.mark.timeout(300)

# (voice, text, params): Orpheus' own sampling defaults, and one hotter request whose LM
# slips into the next frame position: windows with an out-of-range code.
CASES = [
    ("tara", "Hello there", {**RECOMMENDED, "max_new_tokens": 64, "seed": 2}),
    ("leo", "abc", {**RECOMMENDED, "max_new_tokens": 50, "seed": 3}),
    ("mia", "sing", {**RECOMMENDED, "max_new_tokens": 80, "seed": 1, "temperature": 1.0, "top_p": 1.0}),
]


@pytest.fixture(scope="module")
def served():
    """(the conductor's address, its ConductorService)."""
    procs = [ServiceProcess(name, ["--checkpoint", checkpoint()], name=name) for name in ("orpheus_lm", "codec")]

    def models(a: list[str]) -> list:
        return [orpheus_model("orpheus", orpheus_placement([a[0]], [a[1]]))]

    with conductor_server_over(procs, models) as conductor:
        yield conductor.address, conductor.hosted


@pytest.fixture(scope="module")
def mesh(served):
    return served[0]


def prompt(case):
    voice, text, _ = case
    return speech_prompt_ids(checkpoint(), text, voice)


def check(chunks: list[torch.Tensor], token_ids: list[int], seed: int) -> None:
    want = reference_audio(token_ids, seed)
    assert len(chunks) == len(want) >= 3
    for got, ref in zip(chunks, want):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


def speak_all(address, cases):
    async def main():
        return await asyncio.gather(*(speak(address, "orpheus", prompt(c), c[2]) for c in cases))
    return asyncio.run(main())


def test_streamed_audio_equals_the_reference_rule(mesh):
    summaries = speak_all(mesh, CASES)
    for case, summary in zip(CASES, summaries):
        check(summary.chunks, summary.text_ids, case[2]["seed"])
        assert [c[0] for c in summary.codec_codes][:28]  # the codes node's output reached the client
    assert any(num_reference_windows(s.text_ids)[1] > 0 for s in summaries)  # a spoiled window was skipped


def test_the_in_process_runner_equals_the_mesh_and_the_reference(mesh):
    runner = OrpheusRunner.from_checkpoint(checkpoint(), num_blocks=128, block_size=16)
    keys = ("max_new_tokens", "temperature", "top_p", "repetition_penalty", "seed", "stop_token_ids")
    requests = [(f"r{i}", prompt(c), SamplingParams(**{k: tuple(v) if isinstance(v, list) else v
                                                       for k, v in c[2].items() if k in keys}))
                for i, c in enumerate(CASES)]
    for case, result, summary in zip(CASES, runner.generate(requests), speak_all(mesh, CASES)):
        assert result.token_ids == summary.text_ids
        check(result.chunks, result.token_ids, case[2]["seed"])


def test_eight_concurrent_requests_equal_their_solo_results(mesh):
    cases = [(v, t, {**p, "seed": p["seed"] + i // 3}) for i, (v, t, p) in enumerate(CASES * 3)][:8]
    solo = [speak_all(mesh, [c])[0] for c in cases]
    together = speak_all(mesh, cases)
    for a, b in zip(solo, together):
        assert a.text_ids == b.text_ids and len(a.chunks) == len(b.chunks)
        for x, y in zip(a.chunks, b.chunks):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


def test_a_request_without_audio_tokens_ends_with_no_audio(mesh):
    text_only = [128000, *b"no speech here"]  # not the Orpheus prompt: the tiny LM answers in text
    summary = asyncio.run(speak(mesh, "orpheus", text_only, {"max_new_tokens": 12}))
    assert len(summary.text_ids) == 12 and all(t < 128256 for t in summary.text_ids)
    assert summary.num_chunks == 0 and summary.codec_codes == []


def outputs_from(executor, node: str) -> list[str]:
    """Records the ports of every output of `node` that reaches the conductor from its service."""
    ports = []
    target = executor.hooks.route(node, "speak", "probe")
    sink = target.sink

    def recording_sink(events, t):
        ports.extend(p for e in events if isinstance(e, NodeOutput) and e.node == node for p in e.tensors)
        sink(events, t)

    target.sink = recording_sink
    return ports


async def audio_only(address: str, ids: list[int], params: dict) -> tuple[list[torch.Tensor], int]:
    """(the audio chunks, Usage's num_outputs) of a request for audio alone, as the gateway's speech route asks."""
    import grpc
    import numpy as np

    from protos.starmesh.v1 import conductor_pb2 as pb
    from protos.starmesh.v1 import conductor_pb2_grpc

    req = pb.GenerateRequest(model="orpheus", input_ids=ids, output_modalities=[pb.MODALITY_AUDIO])
    req.params.update(params)
    chunks, num_outputs = [], None
    async with grpc.aio.insecure_channel(address) as channel:
        async for ev in conductor_pb2_grpc.ConductorStub(channel).Generate(req):
            assert not ev.HasField("text") and not ev.HasField("tensor")
            if ev.HasField("audio"):
                chunks.append(torch.from_numpy(np.frombuffer(ev.audio.samples, dtype="<f4").copy()))
            if ev.HasField("usage"):
                num_outputs = int(ev.usage.metrics["num_outputs"])
    return chunks, num_outputs


def test_an_audio_only_request_leaves_its_codes_on_the_lm_service(served):
    address, service = served
    ports = outputs_from(service.executors["orpheus"], "codes")
    case = CASES[0]
    full = speak_all(address, [case])[0]
    assert "codes" in ports  # the client took the codes: they came to the conductor
    ports.clear()
    chunks, num_outputs = asyncio.run(audio_only(address, prompt(case), case[2]))
    assert ports == []  # nothing but routes read them now: they never left the LM service
    assert len(chunks) == len(full.chunks) >= 3
    for got, want in zip(chunks, full.chunks):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
    # the text tokens still come (Usage counts them); the codes do not
    assert num_outputs == len(full.text_ids) + len(full.chunks)
