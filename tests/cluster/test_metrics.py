"""Prometheus endpoints of a running deployment: the conductor's request, TTFA, RTF,
image latency and per-edge latency series, and each service's KV pool use and queue
depths, as parsable exposition text."""
from __future__ import annotations

import asyncio
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from client.speech import speak
from cluster.launcher import Cluster
from cluster.spec import ClusterSpec
from engine.tiny_omni import chat_prompt
from cluster.deployments import rewrite

pytestmark = pytest.mark.timeout(300)


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_endpoints_serve_the_series(tiny_omni, tmp_path):
    path = rewrite("colocated", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path))
    with Cluster(ClusterSpec.load(path), path, log=lambda line: None) as cluster:
        for _ in range(2):
            asyncio.run(speak(cluster.conductor_address, "qwen3-omni", chat_prompt("hi"),
                              {"max_new_tokens": 8, "max_frames": 30}))
        conductor = scrape(cluster.metrics["conductor"])
        thinker = scrape(cluster.metrics["thinker"])
        talker = scrape(cluster.metrics["talker"])
    requests = {(s.labels["model"], s.labels["outcome"]): s.value for s in conductor["starmesh_requests"]
                if s.name.endswith("_total")}
    assert requests[("qwen3-omni", "ok")] == 2
    ttfa_count = [s.value for s in conductor["starmesh_ttfa_seconds"] if s.name.endswith("_count")]
    assert ttfa_count == [2]
    assert any(s.name.endswith("_count") and s.value == 2 for s in conductor["starmesh_rtf"])
    assert "starmesh_image_latency_seconds" in conductor
    edges = {s.labels["edge"] for s in conductor["starmesh_edge_latency_seconds"] if s.name.endswith("_count")}
    assert "decode.embeds -> talker.embeds" in edges
    for service in (thinker, talker):
        assert service["starmesh_kv_blocks_used"][0].value == 0
        assert service["starmesh_kv_blocks_total"][0].value > 0
        assert "starmesh_num_waiting" in service and "starmesh_open_requests" in service
