"""Two conductors over the same services: each completes 8 concurrent requests, and
both conductors' requests get the results one conductor gives alone."""
from __future__ import annotations

import asyncio

import pytest

from client.speech import speak
from cluster.launcher import Cluster, free_port
from cluster.spec import ClusterSpec
from engine.tiny_omni import chat_prompt
from services.process import ServiceProcess
from cluster.deployments import rewrite

pytestmark = pytest.mark.timeout(300)
PARAMS = {"max_new_tokens": 8, "max_frames": 24}
PROMPTS = ["hi", "abc", "Tell me", "sing"]


def test_two_conductors_share_the_services(tiny_omni, tmp_path):
    path = rewrite("colocated", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path))
    with Cluster(ClusterSpec.load(path), path, log=lambda line: None) as cluster:
        second = ServiceProcess("", ["--deployment", str(path)], name="conductor-2", port=free_port(),
                                command="conductor", log=lambda line: None).start()
        try:
            async def burst(address):
                return await asyncio.gather(*(speak(address, "qwen3-omni", chat_prompt(PROMPTS[i % 4]), PARAMS)
                                              for i in range(8)))

            async def both():
                return await asyncio.gather(burst(cluster.conductor_address), burst(second.address))

            first_results, second_results = asyncio.run(both())
            alone = asyncio.run(burst(cluster.conductor_address))
        finally:
            second.stop()
    for results in (first_results, second_results):
        assert [r.codec_codes for r in results] == [r.codec_codes for r in alone]
        assert all(r.num_chunks > 0 for r in results)
