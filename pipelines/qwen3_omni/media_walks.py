"""The walks of requests that carry media: one encoder node and one media prefill in front
of the decode loop, whatever the parts and their order.

    input.media, input.media_parts --> media_encoder --rows, deepstack, parts, seconds--\\
    input.input_ids ------------------------------------------------------------------> prefill_media --> decode loop
                                                      prompt_ids, embeds, hidden,          |
                                                      image_grids, video_grids, video_seconds v
                                                                         talker_media loop ~> code2wav -> audio

A request's media is one list of parts in prompt order (audio clips, images, videos, any
number, in any order the chat template allows): the walk inputs `media` (uint8 [n], every
part's file) and `media_parts` (int64 [k, 2]: kind, bytes per part). The encoder (a shared
service, services/encoder) returns every part's rows in the same order; prefill_media
(on the thinker, sharing its KV context with decode) widens each placeholder to its
part's rows, splices them and uses the multimodal rope ids, and hands the talker the
widened ids, the prompt's accept-layer hidden states (read at media positions) and the
image and video grids (its rope ids). So every port of every node is always fed: no
optional inputs, and two walks serve every combination.

`speak_media` is that walk; `chat_media` stops at the decode loop (the same thinker work,
so the same text ids: no talker, no code2wav), for requests that want text alone. A graph
has them when its placement places `media_encoder`; text-only requests never enter them.
"""
from __future__ import annotations

from graph.chunking import FixedChunk, LeftContext
from graph.composites import DynamicLoop, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge
from graph.node import GraphNode

MEDIA_ENCODER, PREFILL_MEDIA, TALKER_MEDIA = "media_encoder", "prefill_media", "talker_media"
MEDIA_INPUTS = ("media", "media_parts")  # walk inputs: the parts' files, (kind, bytes) per part
ENCODED = ("rows", "deepstack", "parts", "seconds")  # media_encoder -> prefill_media
TALKER_GRIDS = ("image_grids", "video_grids", "video_seconds")  # prefill_media -> talker_media: its rope ids
MEDIA_ROWS = ("token", "hidden", "embeds", "prompt_ids", *TALKER_GRIDS)


def media_nodes() -> list[GraphNode]:
    return [GraphNode(MEDIA_ENCODER, MEDIA_INPUTS, ENCODED),
            GraphNode(PREFILL_MEDIA, ("input_ids", *ENCODED), MEDIA_ROWS, stateful=True),
            GraphNode(TALKER_MEDIA, ("prompt_ids", "prompt_embeds", "prompt_hidden", *TALKER_GRIDS, "embeds"),
                      ("codes",), stateful=True)]


def _front_edges() -> list:
    """The inputs into the encoder, its rows into prefill_media, the first tokens on."""
    edges = [E(f"input.{p}", f"{MEDIA_ENCODER}.{p}") for p in MEDIA_INPUTS]
    edges += [E(f"{MEDIA_ENCODER}.{p}", f"{PREFILL_MEDIA}.{p}") for p in ENCODED]
    return edges + [E("input.input_ids", f"{PREFILL_MEDIA}.input_ids"), E(f"{PREFILL_MEDIA}.token", "decode.token"),
                    E(f"{PREFILL_MEDIA}.token", "output.first_token"), E("decode.token", "output.token")]


def media_chat_walk(decode_loop: str, max_text_tokens: int):
    """The text-only walk of a request carrying media: encoder, media prefill, decode loop."""
    from graph.walk import Walk

    decode = DynamicLoop(decode_loop, "decode", max_iters=max_text_tokens, stop=StopRule("decode.token"))
    return Walk("chat_media", Sequential(MEDIA_ENCODER, PREFILL_MEDIA, decode), _front_edges())


def media_walk(loops: tuple[str, str], chunking: tuple[int, int, int], max_text_tokens: int, max_frames: int):
    """The speak walk of a request carrying media."""
    from graph.walk import Walk

    decode_loop, talker_loop = loops
    chunk_size, left_context, first_chunk = chunking
    decode = DynamicLoop(decode_loop, "decode", max_iters=max_text_tokens, stop=StopRule("decode.token"))
    talk = DynamicLoop(talker_loop, TALKER_MEDIA, max_iters=max_frames, stop=StopRule(f"{TALKER_MEDIA}.codes"))
    frames = LeftContext(chunk_size, left_context, first=first_chunk)
    edges = _front_edges()
    edges += [E(f"{PREFILL_MEDIA}.{p}", f"{TALKER_MEDIA}.{p}") for p in ("prompt_ids", *TALKER_GRIDS)]
    edges += [
        E(f"{PREFILL_MEDIA}.embeds", f"{TALKER_MEDIA}.prompt_embeds"),
        E(f"{PREFILL_MEDIA}.hidden", f"{TALKER_MEDIA}.prompt_hidden"),
        StreamingGraphEdge("decode.embeds", f"{TALKER_MEDIA}.embeds", chunk_policy=FixedChunk(1),
                           continue_after_producer_done=True),
        StreamingGraphEdge(f"{TALKER_MEDIA}.codes", "code2wav.codes", chunk_policy=frames,
                           max_buffered=max(4096, frames.min_buffer)),
        E(f"{TALKER_MEDIA}.codes", "output.codes"),
        E("code2wav.audio", "output.audio"),
    ]
    return Walk("speak_media", Sequential(MEDIA_ENCODER, PREFILL_MEDIA, decode, talk, "code2wav"), edges)


def has_media(inputs) -> bool:
    """Whether a request's inputs carry media parts."""
    return "media" in inputs
