"""The Orpheus speech walk: LM prefill -> decode loop ~> token -> code loop ~>
SlidingWindow(28, 7) -> SNAC -> audio to the client.

    prefill --token--> decode loop (inside the LM service, stops at END_OF_SPEECH)
       | token              \\ token, one per step: FixedChunk(1)
       v                     v
    codes loop (inside the LM service: counts accepted codes) --codes--> SlidingWindow(28, 7) --> snac --> audio

The codes node sees prefill's token first (it is the first audio token), then every
decode token. Each snac run gets one window of 28 codes (4 frames) and answers with the
reference decoder's 2048 samples, or nothing (residual or out-of-range window).
"""
from __future__ import annotations

from engine.models.orpheus import END_OF_SPEECH
from engine.models.orpheus.windows import STRIDE_CODES, WINDOW_CODES
from graph.chunking import FixedChunk, SlidingWindow
from graph.composites import DynamicLoop, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph

DECODE_LOOP = "decode_loop"   # runs inside the LM service
CODE_LOOP = "code_loop"       # runs inside the LM service too
INNER_LOOPS = frozenset({DECODE_LOOP, CODE_LOOP})
ROWS = ("token", "hidden", "embeds")
# The walk's outputs (conductor.model.OUTPUT_KINDS); audio is float32 [S] at SAMPLE_RATE.
OUTPUT_KINDS = {"first_token": "text", "token": "text", "codes": "codes", "audio": "audio"}


def orpheus_graph(max_new_tokens: int = 8192, name: str = "orpheus") -> WalkGraph:
    nodes = [
        GraphNode("prefill", ("input_ids",), ROWS, stateful=True),
        GraphNode("decode", ("token",), ROWS, stateful=True),
        GraphNode("codes", ("first_token", "token"), ("codes",), stateful=True),
        GraphNode("snac", ("codes",), ("audio",)),
    ]
    decode = DynamicLoop(DECODE_LOOP, "decode", max_iters=max_new_tokens,
                         stop=StopRule("decode.token", stop_token_ids=(END_OF_SPEECH,)))
    codes = DynamicLoop(CODE_LOOP, "codes", max_iters=max_new_tokens + 1, stop=StopRule("codes.codes"))
    windows = SlidingWindow(WINDOW_CODES, STRIDE_CODES)
    walk = Walk("speak", Sequential("prefill", decode, codes, "snac"), [
        E("input.input_ids", "prefill.input_ids"),
        E("prefill.token", "decode.token"),
        E("prefill.token", "codes.first_token"),
        StreamingGraphEdge("decode.token", "codes.token", chunk_policy=FixedChunk(1)),
        StreamingGraphEdge("codes.codes", "snac.codes", chunk_policy=windows,
                           max_buffered=max(4096, windows.min_buffer)),
        E("prefill.token", "output.first_token"),
        E("decode.token", "output.token"),
        E("codes.codes", "output.codes"),
        E("snac.audio", "output.audio"),
    ])
    return WalkGraph(name, nodes, [walk])
