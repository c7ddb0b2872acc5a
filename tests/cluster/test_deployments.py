"""Deployments started the way users start them (cluster.launcher, the engine of
`starmesh up`): the co-located and two-host (Mooncake) layouts give the default
layout's audio (what the session's `starmesh up` of it answered when it started:
tests/cluster/local_up.py), and one request is one trace across the conductor and every
service, read back from the local trace store."""
from __future__ import annotations

import asyncio

import pytest
import torch

from client.speech import speak
from cluster.launcher import Cluster
from cluster.launchable import read_launchable
from cluster.trace_store import edge_table
from engine.models.qwen3_omni.tiny import chat_prompt
from cluster.shipped_deployments import rewrite_shipped
from tests.cluster.local_up import SPEECH_PARAMS, SPEECH_PROMPT
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(400)


def _speak(deployment, trace_store: str = "", request_id: str = ""):
    with Cluster(read_launchable(deployment), deployment, trace_store=trace_store, log=lambda line: None) as c:
        return asyncio.run(speak(c.conductor_address, "qwen3-omni", chat_prompt(SPEECH_PROMPT), SPEECH_PARAMS,
                                 request_id=request_id))


@pytest.fixture(scope="module")
def default_audio(local_up):
    """The default layout's: the session's `starmesh up` of it answered SPEECH_PROMPT when it started."""
    return local_up.speech


def _same_audio(summary, default_audio) -> None:
    assert summary.text_ids == default_audio.text_ids
    assert summary.codec_codes == default_audio.codec_codes
    torch.testing.assert_close(torch.cat(summary.chunks), torch.cat(default_audio.chunks), atol=1e-6, rtol=0)


def test_two_host_mooncake_gives_the_default_audio(tiny_omni, default_audio, tmp_path):
    _same_audio(_speak(rewrite_shipped("two-host", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path))), default_audio)


def test_colocated_gives_the_default_audio_in_one_trace_across_every_process(colocated, trace_store,
                                                                             default_audio):
    summary = asyncio.run(speak(colocated.conductor_address, "qwen3-omni", chat_prompt(SPEECH_PROMPT), SPEECH_PARAMS,
                                request_id="traced-1"))
    _same_audio(summary, default_audio)
    services = {"conductor", "thinker", "talker+codec"}
    assert wait_until(lambda: services <= {s["service"] for s in trace_store.request("traced-1")["spans"]}, 15)
    # each process exports its spans in its own batches: wait for both edges' spans too
    wanted = {"decode.embeds -> talker.embeds", "talker.codes -> code2wav.codes"}
    assert wait_until(lambda: wanted <= {r["edge"] for r in edge_table(trace_store.request("traced-1")["spans"])},
                      30)
    found = trace_store.request("traced-1")
    assert len(found["trace_ids"]) == 1
    rows = {r["edge"]: r for r in edge_table(found["spans"])}
    assert rows["decode.embeds -> talker.embeds"]["items"] > 0 and rows["decode.embeds -> talker.embeds"]["p50_us"] > 0
    # co-located: handed over in the talker's process, and still traced there
    assert rows["talker.codes -> code2wav.codes"]["transport"] == "inproc"
