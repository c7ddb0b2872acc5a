"""The conductor's request metrics follow what the model declares: which outputs are
audio (time to first audio, real-time factor at the model's sample rate) and which are
images (image latency), whatever the outputs are named."""
from __future__ import annotations

import torch

from conductor.metrics import ConductorMetrics, RequestMeter
from conductor.model import ServedModel
from conductor.placement import Placement
from graph.composites import Sequential
from graph.edge import GraphEdge
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph


def _model(**declared) -> ServedModel:
    walk = Walk("w", Sequential("a"), [GraphEdge("input.x", "a.x"), GraphEdge("a.y", "output.wave"),
                                       GraphEdge("a.y", "output.pic"), GraphEdge("a.y", "output.audio")])
    graph = WalkGraph("m", [GraphNode("a", ("x",), ("y",))], [walk])
    placement = Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}}, "placement": {"a": "s"}})
    return ServedModel("m", graph, placement, **declared)


def _value(metrics: ConductorMetrics, name: str, suffix: str) -> float:
    return metrics.registry.get_sample_value(f"{name}{suffix}", {"model": "m"}) or 0.0


def test_audio_and_image_outputs_are_the_declared_ones():
    metrics = ConductorMetrics()
    meter = RequestMeter(metrics, _model(output_kinds={"wave": "audio", "pic": "image"}, sample_rate=16000), 0.0)
    meter.output("wave", torch.zeros(8000), 0.25)   # half a second of audio at 16 kHz
    meter.output("wave", torch.zeros(1, 8000), 0.5)
    meter.output("pic", torch.zeros(2, 2, 3), 0.75)
    meter.end("ok", 2.0)
    assert _value(metrics, "starmesh_ttfa_seconds", "_sum") == 0.25
    assert _value(metrics, "starmesh_rtf_ratio", "_sum") == 2.0  # 2 wall seconds per 1 audio second
    assert _value(metrics, "starmesh_image_latency_seconds", "_count") == 1
    assert metrics.registry.get_sample_value("starmesh_requests_total", {"model": "m", "outcome": "ok"}) == 1


def test_an_output_named_audio_is_not_audio_unless_declared():
    metrics = ConductorMetrics()
    meter = RequestMeter(metrics, _model(), 0.0)
    meter.output("audio", torch.zeros(24000), 0.5)
    meter.end("ok", 1.0)
    assert _value(metrics, "starmesh_ttfa_seconds", "_count") == 0
    assert _value(metrics, "starmesh_rtf_ratio", "_count") == 0


def test_requests_waiting_for_admission_are_a_gauge_per_model():
    import asyncio

    from conductor.admission import Admission, AdmissionConfig
    from tests.fixtures.exposition_lint import lint, promtool_problems
    from prometheus_client import generate_latest

    metrics = ConductorMetrics()
    admission = Admission({"m": AdmissionConfig(max_in_flight=1, max_waiting=2)})
    metrics.watch_admission(admission, ["m", "other"])

    async def main() -> float:
        release = asyncio.Event()

        async def hold():
            async with admission.admit("m"):
                await release.wait()

        tasks = [asyncio.create_task(hold()) for _ in range(3)]  # 1 in flight, 2 wait
        while admission.stats("m")["waiting"] < 2:
            await asyncio.sleep(0.01)
        seen = _value(metrics, "starmesh_admission_waiting", "")
        release.set()
        await asyncio.gather(*tasks)
        return seen

    assert asyncio.run(main()) == 2
    assert _value(metrics, "starmesh_admission_waiting", "") == 0
    text = generate_latest(metrics.registry).decode()
    assert 'starmesh_admission_waiting{model="other"} 0.0' in text
    assert lint(text) == [] and promtool_problems(text) == ""
