"""Two conductors over the same services: each completes 8 concurrent requests, and
both conductors' requests get the results one conductor gives alone, also when both
name their requests by the same ids at once (request ids on a service are scoped to the
stream that opened them: neither conductor's request blocks or takes the other's)."""
from __future__ import annotations

import asyncio

import pytest

from client.speech import speak
from cluster.launcher import free_port
from engine.models.qwen3_omni.tiny import chat_prompt
from runtime.process import ServiceProcess

pytestmark = pytest.mark.timeout(300)
PARAMS = {"max_new_tokens": 8, "max_frames": 24}
PROMPTS = ["hi", "abc", "Tell me", "sing"]


async def _burst(address: str, prefix: str = "") -> list:
    """prefix: the requests' ids are prefix0..prefix7 ("": fresh ones)."""
    return await asyncio.gather(*(speak(address, "qwen3-omni", chat_prompt(PROMPTS[i % 4]), PARAMS,
                                        request_id=f"{prefix}{i}" if prefix else "") for i in range(8)))


async def _both(first: str, second: str):
    return await asyncio.gather(_burst(first, "shared-"), _burst(second, "shared-"))


def test_two_conductors_share_the_services(colocated):
    members = ["--mesh-tls", str(colocated.mesh_dir)]  # a member: the services trust no one else
    second = ServiceProcess("", ["--deployment", colocated.path, *members], name="conductor-2", port=free_port(),
                            command="conductor", log=lambda line: None).start()
    try:
        first_results, second_results = asyncio.run(_both(colocated.conductor_address, second.address))
        alone = asyncio.run(_burst(colocated.conductor_address))
    finally:
        second.stop()
    for results in (first_results, second_results):
        assert [r.codec_codes for r in results] == [r.codec_codes for r in alone]
        assert all(r.num_chunks > 0 for r in results)
