"""The Qwen3-Omni speech walk: thinker prefill -> thinker decode loop ~> talker loop ~>
code2wav -> audio to the client.

    prefill --token--> decode loop (inside the thinker)
       |  embeds                 \\ embeds, one row per step: FixedChunk(1), and the
       v                          v talker continues after the thinker is done
    talker loop (inside the talker) --codes--> LeftContext(C, L) --> code2wav --> audio

The talker opens on the thinker's prompt rows and starts speaking on the first text
token's row; code2wav starts on the first window of C frames (`first_chunk` frames when
set, to cut time to first audio). C and L are per deployment.

A request that wants text alone runs the `chat` walk: prefill and the decode loop, the
same thinker work (so the same text ids), without the talker and code2wav. Requests with
media parts (audio, images, videos, any number, in any order) take the media walks
(pipelines.qwen3_omni.media_walks) when the graph is built with them (`media`: its
placement places the encoder): `speak_media`, or `chat_media` when they want text alone.
"""
from __future__ import annotations

from graph.chunking import FixedChunk, LeftContext
from graph.composites import DynamicLoop, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph
from pipelines.qwen3_omni.media_walks import has_media, media_chat_walk, media_nodes, media_walk

DECODE_LOOP = "decode_loop"   # runs inside the thinker
TALKER_LOOP = "talker_loop"   # runs inside the talker
INNER_LOOPS = frozenset({DECODE_LOOP, TALKER_LOOP})
ROWS = ("token", "hidden", "embeds")
# The walk's outputs (conductor.model.OUTPUT_KINDS); audio is float32 [S] at SAMPLE_RATE.
OUTPUT_KINDS = {"first_token": "text", "token": "text", "codes": "codes", "audio": "audio"}


def speech_graph(chunk_size: int = 300, left_context: int = 25, first_chunk: int = 0,
                 max_text_tokens: int = 4096, max_frames: int = 4096, name: str = "qwen3_omni",
                 media: bool = False) -> WalkGraph:
    nodes = [
        # prompt_ids: the whole prompt in the thinker (a continued context's tokens first),
        # which is what the talker's prompt rows stand for
        GraphNode("prefill", ("input_ids",), (*ROWS, "prompt_ids"), stateful=True),
        GraphNode("decode", ("token",), ROWS, stateful=True),
        # prompt_hidden: the accept-layer rows the talker reads at audio/image positions, which a
        # continued context may hold though the new turn has none
        GraphNode("talker", ("prompt_ids", "prompt_embeds", "prompt_hidden", "embeds"), ("codes",), stateful=True),
        GraphNode("code2wav", ("codes",), ("audio",)),
    ]
    decode = DynamicLoop(DECODE_LOOP, "decode", max_iters=max_text_tokens, stop=StopRule("decode.token"))
    talk = DynamicLoop(TALKER_LOOP, "talker", max_iters=max_frames, stop=StopRule("talker.codes"))
    frames = LeftContext(chunk_size, left_context, first=first_chunk)
    walk = Walk("speak", Sequential("prefill", decode, talk, "code2wav"), [
        E("input.input_ids", "prefill.input_ids"),
        E("prefill.prompt_ids", "talker.prompt_ids"),
        E("prefill.token", "decode.token"),
        E("prefill.embeds", "talker.prompt_embeds"),
        E("prefill.hidden", "talker.prompt_hidden"),
        StreamingGraphEdge("decode.embeds", "talker.embeds", chunk_policy=FixedChunk(1),
                           continue_after_producer_done=True),
        StreamingGraphEdge("talker.codes", "code2wav.codes", chunk_policy=frames,
                           max_buffered=max(4096, frames.min_buffer)),
        E("prefill.token", "output.first_token"),
        E("decode.token", "output.token"),
        E("talker.codes", "output.codes"),
        E("code2wav.audio", "output.audio"),
    ])
    chat = Walk("chat", Sequential("prefill", decode), [
        E("input.input_ids", "prefill.input_ids"),
        E("prefill.token", "decode.token"),
        E("prefill.token", "output.first_token"),
        E("decode.token", "output.token"),
    ])
    if not media:
        return WalkGraph(name, nodes, [walk, chat], first_walk=speech_walk)
    walks = [walk, chat, media_walk((DECODE_LOOP, TALKER_LOOP), (chunk_size, left_context, first_chunk),
                                    max_text_tokens, max_frames), media_chat_walk(DECODE_LOOP, max_text_tokens)]
    return WalkGraph(name, nodes + media_nodes(), walks, first_walk=speech_walk)


def speech_walk(inputs: dict, wanted: frozenset[str] = frozenset()) -> str:
    """`chat` (text alone wanted) or `speak`, `_media` for a request carrying media parts."""
    base = "chat" if wanted == {"text"} else "speak"
    return f"{base}_media" if has_media(inputs) else base
