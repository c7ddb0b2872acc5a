"""Text generation: prefill (prompt -> first token) then a decode loop that runs inside
the thinker service (one open, one token per engine step until EOS / max tokens)."""
from __future__ import annotations

from graph.composites import DynamicLoop, Sequential, StopRule
from graph.edge import GraphEdge
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph

DECODE_LOOP = "decode_loop"  # run inside the thinker: pass it in a ServedModel's inner_loops
OUTPUT_KINDS = {"first_token": "text", "token": "text"}  # conductor.model.OUTPUT_KINDS


def text_generation_graph(max_new_tokens: int = 4096, name: str = "text") -> WalkGraph:
    nodes = [
        GraphNode("prefill", ("input_ids",), ("token", "hidden", "embeds"), stateful=True),
        GraphNode("decode", ("token",), ("token", "hidden", "embeds"), stateful=True),
    ]
    loop = DynamicLoop(DECODE_LOOP, "decode", max_iters=max_new_tokens, stop=StopRule("decode.token"))
    walk = Walk("generate", Sequential("prefill", loop), [
        GraphEdge("input.input_ids", "prefill.input_ids"),
        GraphEdge("prefill.token", "decode.token"),
        GraphEdge("prefill.token", "output.first_token"),
        GraphEdge("decode.token", "output.token"),
    ])
    return WalkGraph(name, nodes, [walk])


def text_model(name: str, placement, max_new_tokens: int = 4096):
    """The graph as the conductor serves it: the decode loop inside the thinker, TextParams."""
    from core.input_spec import TOKEN_IDS
    from conductor.model import ServedModel
    from pipelines.prompt_format import ChatTemplate
    from engine.sampling_params import TextParams

    graph = text_generation_graph(max_new_tokens, name=name)
    return ServedModel(name, graph, placement, {DECODE_LOOP}, params=TextParams, output_kinds=OUTPUT_KINDS,
                       tokenizer_node="prefill", prompt=ChatTemplate(), input_specs={"input_ids": TOKEN_IDS})
