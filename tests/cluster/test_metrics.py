"""Prometheus endpoints of a running deployment: the conductor's request, TTFA, RTF,
image latency and per-edge latency series, and each service's KV pool use and queue
depths, as parsable exposition text that passes the conventions `promtool check
metrics` lints, with every process's standard process_* and python_* series."""
from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.main import main
from client.speech import speak
from engine.models.qwen3_omni.tiny import chat_prompt
from tests.fixtures.exposition_lint import lint, promtool_problems, scrape as scrape_text

pytestmark = pytest.mark.timeout(300)


def scrape(url: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(scrape_text(url))}


def _count(samples, suffix: str, **labels) -> float:
    return sum(s.value for s in samples if s.name.endswith(suffix) and all(s.labels.get(k) == v
                                                                          for k, v in labels.items()))


def test_metrics_endpoints_serve_the_series(colocated):
    before = scrape(colocated.metrics["conductor"])
    for _ in range(2):
        asyncio.run(speak(colocated.conductor_address, "qwen3-omni", chat_prompt("hi"),
                          {"max_new_tokens": 8, "max_frames": 30}))
    conductor = scrape(colocated.metrics["conductor"])
    thinker = scrape(colocated.metrics["thinker"])
    talker = scrape(colocated.metrics["talker"])

    def grew(family: str, suffix: str, **labels) -> float:
        return _count(conductor[family], suffix, **labels) - _count(before.get(family, []), suffix, **labels)

    assert grew("starmesh_requests", "_total", model="qwen3-omni", outcome="ok") == 2
    assert grew("starmesh_ttfa_seconds", "_count") == 2
    assert grew("starmesh_rtf_ratio", "_count") == 2
    assert "starmesh_image_latency_seconds" in conductor
    edges = {s.labels["edge"] for s in conductor["starmesh_edge_latency_seconds"] if s.name.endswith("_count")}
    assert "decode.embeds -> talker.embeds" in edges
    for service in (thinker, talker):
        assert service["starmesh_kv_blocks_used"][0].value == 0
        assert service["starmesh_kv_blocks_capacity"][0].value > 0
        assert "starmesh_requests_waiting" in service and "starmesh_open_requests" in service


def test_every_processs_metrics_pass_the_lints(colocated):
    asyncio.run(speak(colocated.conductor_address, "qwen3-omni", chat_prompt("hi"),
                      {"max_new_tokens": 4, "max_frames": 10}))  # so the histograms have samples
    for name, url in colocated.metrics.items():
        text = scrape_text(url)
        assert lint(text) == [], name
        assert promtool_problems(text) == "", name
        for standard in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_gc_collections_total"):
            assert f"\n{standard}" in text, (name, standard)


def test_status_lists_each_processs_metrics_url(colocated, capsys):
    capsys.readouterr()
    members = ["--mesh-tls", str(colocated.mesh_dir)]  # no `starmesh up` publishes them for this cluster
    main(["status", "--deployment", colocated.path, "--json", *members])
    rows = json.loads(capsys.readouterr().out)
    assert {row["service"]: row["metrics"] for row in rows} == {
        name: url for name, url in colocated.metrics.items() if name != "conductor"}
    assert main(["status", "--deployment", colocated.path, *members]) == 0
    text = capsys.readouterr().out
    assert f"metrics {colocated.metrics['conductor']}" in text.splitlines()[-1]
    assert "sessions 0 " in text.splitlines()[-1]  # its open Sessions streams (starmesh_sessions_open)
    assert all(f"metrics {row['metrics']}" in text for row in rows)
