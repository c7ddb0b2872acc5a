"""The stage-pipeline baseline of the speech benchmark (bench.speech's omni-stage model):
the same services and nodes as `pipelines.qwen3_omni.graph.speech_graph`, with every
streaming edge replaced by whole-output handoff, so each stage finishes before the next
starts (how a stage-by-stage system such as transformers' generate(return_audio=True)
runs the three models):

    prefill --token--> decode loop (inside the thinker; accumulates the embeds of every step)
       |  embeds                 | all decode rows, once the thinker is done
       v                         v
    talker loop (opened once with every row, told the thinker is done; accumulates codes)
       | all frames, once the talker is done
       v
    code2wav (one run on every frame) --> audio to the client

The talker takes its decode rows as an open input (no `stream`): its component then ends
the thinker's side right after those rows (services.qwen3_omni.talker). It lives in
bench/, not in pipelines/: no deployment serves it; it is what the benchmark compares
the streaming graph against.
"""
from __future__ import annotations

from conductor.model import ServedModel
from conductor.placement import Placement
from graph.composites import DynamicLoop, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph
from pipelines.qwen3_omni.graph import DECODE_LOOP, ROWS, TALKER_LOOP
from pipelines.qwen3_omni.model import served_speech_model


def stage_graph(max_text_tokens: int = 4096, max_frames: int = 4096, name: str = "qwen3_omni_stage") -> WalkGraph:
    """Walk "speak" with the node names and ports of `speech_graph`, no streaming edge."""
    nodes = [
        GraphNode("prefill", ("input_ids",), ROWS, stateful=True),
        GraphNode("decode", ("token",), ROWS, stateful=True),
        GraphNode("talker", ("prompt_ids", "prompt_embeds", "embeds"), ("codes",), stateful=True),
        GraphNode("code2wav", ("codes",), ("audio",)),
    ]
    decode = DynamicLoop(DECODE_LOOP, "decode", max_iters=max_text_tokens, stop=StopRule("decode.token"),
                         accumulate=["decode.embeds"])
    talk = DynamicLoop(TALKER_LOOP, "talker", max_iters=max_frames, stop=StopRule("talker.codes"),
                       accumulate=["talker.codes"])
    walk = Walk("speak", Sequential("prefill", decode, talk, "code2wav"), [
        E("input.input_ids", "prefill.input_ids"),
        E("input.input_ids", "talker.prompt_ids"),
        E("prefill.token", "decode.token"),
        E("prefill.embeds", "talker.prompt_embeds"),
        E("decode.embeds", "talker.embeds"),    # every decode step's row, after the last one
        E("talker.codes", "code2wav.codes"),    # every frame [F, G], after the talker's last
        E("prefill.token", "output.first_token"),
        E("decode.token", "output.token"),
        E("talker.codes", "output.codes"),
        E("code2wav.audio", "output.audio"),
    ])
    return WalkGraph(name, nodes, [walk])


def stage_model(name: str, placement: Placement) -> ServedModel:
    """The baseline served beside the streaming model, on the same placement (services)."""
    return served_speech_model(name, stage_graph(name=name), placement)
