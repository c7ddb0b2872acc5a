"""The speech model as the conductor serves it: the walk graph plus a placement.

Split (one service per component) or co-located (talker and code2wav in one process):
the graph is the same; only where the nodes run differs.
"""
from __future__ import annotations

from conductor.model import ServedModel
from conductor.placement import Placement
from pipelines.qwen3_omni.graph import INNER_LOOPS, speech_graph

SAMPLE_RATE = 24000


def speech_placement(thinker: list[str], talker: list[str], codec: list[str] | None = None) -> Placement:
    """codec None: code2wav runs in the talker's processes (co-located)."""
    services = {"thinker": {"replicas": thinker}, "talker": {"replicas": talker}}
    where = {"prefill": "thinker", "decode": "thinker", "talker": "talker", "code2wav": "talker"}
    if codec is not None:
        services["codec"] = {"replicas": codec}
        where["code2wav"] = "codec"
    return Placement.from_dict({"services": services, "placement": where,
                                "kv_contexts": {"thinker": ["prefill", "decode"]}})


def speech_model(name: str, placement: Placement, chunk_size: int = 300, left_context: int = 25,
                 first_chunk: int = 0) -> ServedModel:
    graph = speech_graph(chunk_size, left_context, first_chunk, name=name)
    return ServedModel(name, graph, placement, INNER_LOOPS)
