"""toy-tagger as the conductor serves it: one walk, one node.

    tag   prompt (UTF-8 bytes of the user turns, uint8 [n]) -> tag -> tags (label ids,
          int64 [min(n, params.max_len)])

`tags` is a text output: the client reads a TextDelta whose ids are the label ids and
whose text is the labels as words, decoded with the tokenizer the checkpoint of the
`tag` node's service ships (its vocabulary is the labels). Params: TaggerParams
(max_len; no temperature: a tag is an argmax).
"""
from __future__ import annotations

from graph.composites import Sequential
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph

# The walk output (conductor.model.OUTPUT_KINDS): label ids, decoded to words for the client.
OUTPUT_KINDS = {"tags": "text"}


def tagger_graph(name: str = "toy-tagger") -> WalkGraph:
    walk = Walk("tag", Sequential("tag"), [E("input.prompt", "tag.prompt"), E("tag.tags", "output.tags")])
    return WalkGraph(name, [N("tag", ("prompt",), ("tags",))], [walk])


def tagger_model(name: str, placement):
    """What the registry builds for a deployment: the graph on `placement`."""
    from core.input_spec import InputSpec
    from conductor.model import ServedModel
    from engine.models.toy_tagger.params import TaggerParams
    from pipelines.prompt_format import Utf8Prompt

    return ServedModel(name, tagger_graph(name), placement, params=TaggerParams, output_kinds=OUTPUT_KINDS,
                       tokenizer_node="tag", prompt=Utf8Prompt("prompt"),
                       input_specs={"prompt": InputSpec("bytes", 1, what="UTF-8 text")})
