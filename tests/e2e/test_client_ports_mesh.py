"""Qwen3-Omni's prefill feeds the client (its first token) and the talker (prompt rows
[n, hidden]) in one run: through real thinker, talker and codec processes that put
every tensor they may in shared memory (inline threshold 0), the rows reach the talker
by reference while the token travels inline, and the request's text, codes and audio
equal the in-process runner's bit for bit."""
from __future__ import annotations

import pytest
import torch
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from client.speech import speak
from conductor.service import ConductorService
from engine.models.qwen3_omni.tiny import chat_prompt
from pipelines.qwen3_omni.model import speech_model, speech_placement
from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from runtime.telemetry import Telemetry
from tests.e2e.speech_mesh import CHUNK, LEFT, run, stop_procs
from tests.fixtures import registry
from tests.fixtures.services import describe, start_side_by_side, wait_until
from tests.fixtures.threads import one_thread

pytestmark = pytest.mark.timeout(300)

PROMPT = "Tell me"


def _edge_spans(exporter: InMemorySpanExporter) -> dict[str, str]:
    """edge name -> the transport its values took (the conductor's edge spans)."""
    return {s.name: s.attributes.get("starmesh.transport") for s in exporter.get_finished_spans()
            if s.name.startswith("edge ")}


def test_prompt_rows_go_by_shared_memory_and_the_token_inline(tiny_omni):
    with one_thread():  # as the services run: the audio is compared bit for bit
        ref = SpeechRunner.from_checkpoint(str(tiny_omni)).generate([SpeechRequest(
            "ref", chat_prompt(PROMPT), max_text_tokens=12, max_frames=24, chunk_size=CHUNK, left_context=LEFT)])[0]
    exporter = InMemorySpanExporter()
    telemetry = Telemetry("conductor", span_processors=[SimpleSpanProcessor(exporter)], environ={})
    procs = {name: ServiceProcess(name, ["--checkpoint", str(tiny_omni), "--inline-threshold", "0"], name=name)
             for name in ("thinker", "talker", "codec")}
    conductor = None
    try:
        start_side_by_side(list(procs.values()))
        for proc in procs.values():
            registry.register(proc.address, describe(proc.address).arena)
        placement = speech_placement([procs["thinker"].address], [procs["talker"].address],
                                     [procs["codec"].address])
        conductor = BackgroundServer(ConductorService([speech_model("omni", placement, CHUNK, LEFT)], telemetry),
                                     telemetry=telemetry)
        conductor.start()
        summary = run(speak(conductor.address, "omni", chat_prompt(PROMPT), {"max_new_tokens": 12,
                                                                            "max_frames": 24}))
        assert wait_until(lambda: "edge prefill.hidden -> talker.prompt_hidden" in _edge_spans(exporter))
        transports = _edge_spans(exporter)
        # the one prefill run's outputs: rows the talker alone reads by reference, the
        # token (a walk output too) by value
        assert transports["edge prefill.hidden -> talker.prompt_hidden"] == "shm"
        assert transports["edge prefill.embeds -> talker.prompt_embeds"] == "shm"
        assert transports["edge prefill.token -> decode.token"] == "inline"
        assert summary.text_ids == ref.text_ids and summary.codec_codes == ref.frames
        audio = torch.cat(summary.chunks)
        assert audio.shape == ref.audio.shape and torch.equal(audio, ref.audio)
        # the request's leases went with it: the conductor's Cancel freed them at the thinker
        assert wait_until(lambda: describe(procs["thinker"].address).transport.num_leases == 0, timeout_s=30)
    finally:
        if conductor is not None:
            conductor.stop()
        stop_procs(procs)
