"""Admission by capacity through real services: a talker made slow by a test hook (it
sleeps per sequence per step, so its capacity does not depend on this machine), a burst
past what it sustains: the extra requests wait for admission while the admitted ones
keep ahead of playback on the client's clock, and every request still gets exactly its
solo output. The conductor's capacity comes from what it measured, not from a setting."""
from __future__ import annotations

import asyncio

import pytest

from client.speech import speak
from conductor.admission import Admission, AdmissionConfig
from conductor.capacity import CapacityConfig
from conductor.service import ConductorService
from engine.models.qwen3_omni.tiny import chat_prompt
from pipelines.qwen3_omni.model import speech_model, speech_placement
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from tests.e2e.speech_mesh import run
from tests.fixtures.services import start_side_by_side, wait_until
from bench.speech_mesh import viability

pytestmark = pytest.mark.timeout(300)

PARAMS = {"max_new_tokens": 8, "max_frames": 24, "min_frames": 24}
SLOW_MS = 25  # per sequence per talker step: one stream alone makes a frame (80 ms) in ~25 ms
BURST = 8


@pytest.fixture(scope="module")
def slow_mesh(tiny_omni):
    args = ["--checkpoint", str(tiny_omni)]
    procs = {"thinker": ServiceProcess("thinker", args, name="thinker"),
             "talker": ServiceProcess("talker", args + ["--option", f"step_delay_ms_per_seq={SLOW_MS}"],
                                      name="slow-talker"),
             "codec": ServiceProcess("codec", args, name="codec")}
    conductor = None
    try:
        start_side_by_side(list(procs.values()))
        placement = speech_placement(*([procs[n].address] for n in ("thinker", "talker", "codec")))
        admission = Admission(default=AdmissionConfig(max_in_flight=BURST, max_waiting=BURST, capacity=CapacityConfig(
            headroom=1.0, window_s=0.2)))  # admit while the estimate gives every stream 2x real time
        conductor = BackgroundServer(ConductorService([speech_model("omni", placement, 8, 4)], admission=admission))
        conductor.start()
        yield conductor.address, admission
    finally:
        if conductor is not None:
            conductor.stop()
        for p in procs.values():
            p.stop()


async def _wave(address: str, n: int):
    return await asyncio.gather(*(speak(address, "omni", chat_prompt("Hello there"), PARAMS, timeout_s=240)
                                  for _ in range(n)))


def test_past_the_measured_capacity_requests_wait_and_admitted_ones_keep_playing(slow_mesh):
    address, admission = slow_mesh
    capacity = admission._gate("omni").capacity
    solo = run(_wave(address, 1))[0]
    assert wait_until(lambda: run(_wave(address, 2)) and bool(capacity.rates), timeout_s=180)  # measured at work
    assert capacity.estimate(BURST) < BURST * 2  # the slow talker cannot give 8 streams 2x real time
    before = admission.stats("omni")
    summaries = run(_wave(address, BURST))
    after = admission.stats("omni")
    assert after["waited"] > before["waited"]  # some of the burst waited for admission ...
    assert after["refused"] == before["refused"] == 0  # ... none beyond the queue
    for s in summaries:  # ... and the admitted ones were never starved
        good, later = viability(s.chunk_times_s, [int(c.numel()) for c in s.chunks])
        assert good == later, f"a stream underran: {s.chunk_times_s}"
        assert s.text_ids == solo.text_ids and s.codec_codes == solo.codec_codes  # order never changes outputs
    admission.check_integrity()
