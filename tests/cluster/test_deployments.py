"""Deployments started the way users start them (cluster.launcher, the engine of
`starmesh up`): the co-located and two-host (Mooncake) layouts give the default
layout's audio, and one request is one trace across the conductor and every service,
read back from the local trace store."""
from __future__ import annotations

import asyncio

import pytest
import torch

from client.speech import speak
from cluster.launcher import Cluster
from cluster.spec import ClusterSpec
from cluster.trace_store import TraceStore, edge_table
from engine.tiny_omni import chat_prompt
from cluster.deployments import rewrite
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(400)
PARAMS = {"max_new_tokens": 12, "max_frames": 40}


def _speak(deployment, trace_store: str = "", request_id: str = ""):
    with Cluster(ClusterSpec.load(deployment), deployment, trace_store=trace_store, log=lambda line: None) as c:
        return asyncio.run(speak(c.conductor_address, "qwen3-omni", chat_prompt("Hello there"), PARAMS,
                                 request_id=request_id))


@pytest.fixture(scope="module")
def default_audio(tiny_omni, tmp_path_factory):
    path = rewrite("local", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path_factory.mktemp("d")))
    return _speak(path)


@pytest.mark.parametrize("layout", ["colocated", "two-host"])
def test_layouts_give_the_default_audio(layout, tiny_omni, default_audio, tmp_path):
    summary = _speak(rewrite(layout, {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path)))
    assert summary.text_ids == default_audio.text_ids
    assert summary.codec_codes == default_audio.codec_codes
    torch.testing.assert_close(torch.cat(summary.chunks), torch.cat(default_audio.chunks), atol=1e-6, rtol=0)


def test_one_request_is_one_trace_across_every_process(tiny_omni, tmp_path):
    store = TraceStore().start()
    try:
        path = rewrite("local", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path))
        _speak(path, trace_store=store.otlp_address, request_id="traced-1")
        services = {"conductor", "thinker", "talker", "codec"}
        # processes flush their spans when they stop: all are stopped here
        assert wait_until(lambda: services <= {s["service"] for s in store.request("traced-1")["spans"]}, 10)
        found = store.request("traced-1")
        assert len(found["trace_ids"]) == 1
        rows = {r["edge"]: r for r in edge_table(found["spans"])}
        assert rows["talker.codes -> code2wav.codes"]["items"] > 0
        assert rows["decode.embeds -> talker.embeds"]["p50_us"] > 0
    finally:
        store.stop()
