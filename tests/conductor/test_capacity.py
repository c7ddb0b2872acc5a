"""Playback on the conductor's clock, capacity measured from streams, admission by capacity."""
from __future__ import annotations

import asyncio

import pytest

from conductor.admission import Admission, AdmissionConfig
from conductor.capacity import Capacity, CapacityConfig
from conductor.playback import Playback

RATE = 100  # samples per second: 100 samples = 1 s of audio


def test_playback_origin_moves_on_first_audio_and_on_stalls_only():
    p = Playback(RATE, arrival_s=10.0)
    assert p.origin_s == 10.0 and not p.is_playing
    assert p.on_audio(50, 10.4) == pytest.approx(10.4)    # first audio: plays from its send time
    assert p.on_audio(100, 10.7) is None                  # sent before the 0.5 s played out
    assert p.lead_s(10.7) == pytest.approx(1.2)           # plays until 11.9
    assert p.on_audio(100, 12.4) == pytest.approx(10.9)   # 0.5 s stall: everything plays later
    assert (p.num_underruns, p.underrun_s) == (1, pytest.approx(0.5))
    assert p.attributes()["starmesh.continuous"] is False
    assert p.attributes()["starmesh.ttfa_ms"] == pytest.approx(400.0)


def test_a_ttfa_target_makes_the_first_audio_due_then_and_counts_from_admission():
    p = Playback(RATE, arrival_s=10.0, ttfa_target_s=0.3)
    assert p.origin_s == pytest.approx(10.3)              # the first chunk is due at the target
    p.admitted(11.0)                                      # it waited in the queue: deadlines start now
    assert (p.arrival_s, p.origin_s) == (11.0, pytest.approx(11.3))
    assert p.on_audio(50, 11.2) == pytest.approx(11.2)    # then playback rules the origin, as without one
    assert p.attributes()["starmesh.ttfa_ms"] == pytest.approx(200.0)
    with pytest.raises(ValueError, match="ttfa_target_s"):
        Playback(RATE, 0.0, ttfa_target_s=-0.1)


def _stream(capacity: Capacity, now: float) -> Playback:
    p = Playback(RATE, now)
    capacity.add(p)
    p.on_audio(1, now)
    return p


def test_capacity_is_measured_over_windows_of_the_same_playing_streams():
    cap = Capacity(CapacityConfig(window_s=1.0))
    a, b = _stream(cap, 0.0), _stream(cap, 0.0)
    assert not cap.observe(0.0)  # opens the window
    a.on_audio(300, 0.5)         # 3 s of audio for a, 1 s for b, within 1 s of wall time
    b.on_audio(100, 0.9)
    assert not cap.observe(0.9)
    assert cap.observe(1.0)
    assert cap.rates == {2: pytest.approx(4.0)}
    cap.add(Playback(RATE, 1.0))  # a new stream, not playing yet: no window until it plays
    assert not cap.observe(2.5) and cap.rates == {2: pytest.approx(4.0)}


def test_capacity_fits_a_step_cost_line_and_admits_within_the_headroom():
    cap = Capacity(CapacityConfig(headroom=0.25))
    assert cap.admits(40)  # nothing measured yet
    cap.rates = {1: 10.0}  # one load: every cost taken as per stream (a lower bound)
    assert cap.estimate(8) == pytest.approx(10.0) and cap.admits(7) and not cap.admits(8)
    cap.rates = {1: 5.0, 4: 12.0}  # 0.2 and 0.333 s per audio second: a = 0.156, b = 0.044
    assert cap.estimate(16) == pytest.approx(16 / (0.15556 + 0.04444 * 16), rel=1e-3)
    assert cap.admits(13) and not cap.admits(14)
    assert cap.admits(0)  # an idle deployment always takes one
    assert Capacity(CapacityConfig(enabled=False)).admits(10**6)


def test_admission_holds_streams_past_the_measured_capacity_and_admits_them_as_it_grows():
    async def main():
        admission = Admission(default=AdmissionConfig(max_in_flight=8, max_waiting=4))
        gate = admission._gate("m")
        gate.capacity.rates = {1: 2.0}  # 2 audio s/s: one stream fits with 25 % to spare, not two
        first = Playback(RATE, 0.0)
        async with admission.admit("m", first) as waited:
            assert waited < 1.0  # admitted at once
            second = asyncio.ensure_future(_hold(admission, Playback(RATE, 0.0)))
            await asyncio.sleep(0)
            assert admission.stats("m")["waiting"] == 1 and not second.done()
            admission.check_integrity()
            gate.capacity.rates = {1: 2.0, 2: 6.0}  # measured: two fit now
            gate.poke()
            assert await asyncio.wait_for(second, 10) >= 0  # admitted once capacity grew
        assert admission.stats("m") == {"in_flight": 0, "waiting": 0, "refused": 0, "admitted": 2, "waited": 1}
        admission.check_integrity()

    asyncio.run(main())


async def _hold(admission: Admission, playback: Playback) -> float:
    async with admission.admit("m", playback) as waited:
        return waited


def test_capacity_config_names_the_bad_field():
    with pytest.raises(ValueError, match="admission.capacity.headroom"):
        CapacityConfig(headroom=-1)
    with pytest.raises(ValueError, match="admission.capacity.window_s"):
        CapacityConfig(window_s=0)


@pytest.mark.parametrize("field, good, bad", [("ttfa_target_s", 0.3, b) for b in (-0.1, float("nan"), 60.0, "0.3", True)]
                         + [("max_held_text", 8, b) for b in (-1, 4097, 2.0, "8", True)])
def test_a_models_stream_fields_are_checked_once(field, good, bad):
    from bench import toys
    from conductor.model import ServedModel
    from conductor.placement import Placement
    from core.errors import GraphError

    placement = Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}},
                                     "placement": {"embed": "s", "lm": "s", "codec": "s"}})
    assert getattr(ServedModel("ok", toys.toy_pipeline(), placement, {"gen"}, **{field: good}), field) == good
    with pytest.raises(GraphError, match=field):
        ServedModel("bad", toys.toy_pipeline(), placement, {"gen"}, **{field: bad})
