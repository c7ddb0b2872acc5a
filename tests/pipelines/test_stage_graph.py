"""The stage-pipeline baseline (whole-output handoff between thinker, talker and
code2wav) computes what the streaming speech graph computes: same text ids and codes;
only when each stage starts differs. Both through in-process components."""
from __future__ import annotations

import asyncio

import pytest
import torch

from conductor.executor_setup import inprocess_executor
from engine.models.qwen3_omni.tiny import chat_prompt
from pipelines.qwen3_omni.graph import INNER_LOOPS, speech_graph
from bench.stage_graph import stage_graph
from services.qwen3_omni.code2wav import Code2WavComponent
from services.qwen3_omni.talker import TalkerComponent
from cluster.registry import build_component

pytestmark = pytest.mark.timeout(120)


def _run(graph, checkpoint: str, prompt: list[int]) -> dict:
    components = [build_component("thinker", checkpoint=checkpoint), TalkerComponent.from_checkpoint(checkpoint),
                  Code2WavComponent.from_checkpoint(checkpoint)]

    async def main():
        out = {}
        async with inprocess_executor(graph, components, INNER_LOOPS) as ex:
            async for name, value in ex.generate("r", {"input_ids": (torch.tensor(prompt),)},
                                                 {"max_new_tokens": 12, "max_frames": 30}):
                out.setdefault(name, []).append(value)
        return out

    return asyncio.run(main())


def test_stage_graph_equals_the_streaming_graph(tiny_omni):
    prompt = chat_prompt("Hello there")
    streaming = _run(speech_graph(8, 4), str(tiny_omni), prompt)
    stage = _run(stage_graph(), str(tiny_omni), prompt)

    def text(out):
        return [int(t) for t in out["first_token"]] + [int(t.reshape(-1)[0]) for t in out.get("token", [])]

    def codes(out):
        return torch.cat([c.reshape(-1, c.shape[-1]) for c in out["codes"]])

    assert text(stage) == text(streaming)
    assert torch.equal(codes(stage), codes(streaming))
    assert sum(a.numel() for a in stage["audio"]) > 0
