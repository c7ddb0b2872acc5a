"""The speech walks of requests that carry audio and/or an image: the encoder nodes in front
of prefill, on their own services (shareable by every model with the same towers).

    input.audio --> audio_encoder --embeds--------------------\\
    input.image --> vision_encoder --embeds, deepstack, grid--> prefill_<kinds> --> decode loop
    input.input_ids ------------------------------------------/        |  prompt_ids, embeds, hidden, image_grids
                                                                       v
                                           talker_media loop ~> code2wav -> audio

One prefill node per combination (`prefill_audio`, `prefill_image`, `prefill_audio_image`),
each with exactly the ports its walk feeds; they run on the thinker and share its KV
context with `decode`. The prompt holds one placeholder per medium; prefill widens it to
the encoder's rows and hands the talker the widened ids, its prompt's accept-layer hidden
states (the talker reads them at media positions) and the image grids (its rope ids).
A graph has the walks of the towers its placement places (`audio_encoder`,
`vision_encoder`); text-only requests never enter them.
"""
from __future__ import annotations

from graph.chunking import FixedChunk, LeftContext
from graph.composites import DynamicLoop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge
from graph.node import GraphNode

AUDIO_NODE, VISION_NODE, TALKER_MEDIA = "audio_encoder", "vision_encoder", "talker_media"
KINDS = {"audio": AUDIO_NODE, "image": VISION_NODE}   # walk input -> the encoder node that reads it
MEDIA_ROWS = ("token", "hidden", "embeds", "prompt_ids", "image_grids")
_PORTS = {"audio": ("audio_embeds",), "image": ("image_embeds", "image_deepstack", "image_grid")}
_FROM = {"audio_embeds": "audio_encoder.embeds", "image_embeds": "vision_encoder.embeds",
         "image_deepstack": "vision_encoder.deepstack", "image_grid": "vision_encoder.grid"}


def prefill_node(kinds: tuple[str, ...]) -> str:
    return "prefill_" + "_".join(kinds)


def media_combinations(placed: set[str]) -> list[tuple[str, ...]]:
    """The kinds' combinations whose encoders are placed, e.g. [("audio",), ("image",), ("audio", "image")]."""
    kinds = [k for k in KINDS if KINDS[k] in placed]
    combos = [(k,) for k in kinds]
    return combos + ([tuple(kinds)] if len(kinds) == 2 else [])


def media_nodes(combos: list[tuple[str, ...]]) -> list[GraphNode]:
    kinds = sorted({k for c in combos for k in c})
    nodes = []
    if "audio" in kinds:
        nodes.append(GraphNode(AUDIO_NODE, ("audio",), ("embeds",)))
    if "image" in kinds:
        nodes.append(GraphNode(VISION_NODE, ("image",), ("embeds", "deepstack", "grid")))
    for combo in combos:
        ports = ("input_ids",) + tuple(p for k in combo for p in _PORTS[k])
        nodes.append(GraphNode(prefill_node(combo), ports, MEDIA_ROWS, stateful=True))
    if combos:
        nodes.append(GraphNode(TALKER_MEDIA, ("prompt_ids", "prompt_embeds", "prompt_hidden", "image_grids",
                                              "embeds"), ("codes",), stateful=True))
    return nodes


def media_walk(combo: tuple[str, ...], loops: tuple[str, str], chunking: tuple[int, int, int],
               max_text_tokens: int, max_frames: int):
    """The speak walk of a request carrying the media `combo`."""
    from graph.walk import Walk

    decode_loop, talker_loop = loops
    chunk_size, left_context, first_chunk = chunking
    prefill = prefill_node(combo)
    encoders = [KINDS[k] for k in combo]
    front = encoders[0] if len(encoders) == 1 else Parallel(*encoders)
    decode = DynamicLoop(decode_loop, "decode", max_iters=max_text_tokens, stop=StopRule("decode.token"))
    talk = DynamicLoop(talker_loop, TALKER_MEDIA, max_iters=max_frames, stop=StopRule(f"{TALKER_MEDIA}.codes"))
    frames = LeftContext(chunk_size, left_context, first=first_chunk)
    edges = [E(f"input.{k}", f"{KINDS[k]}.{k}") for k in combo]
    edges += [E(_FROM[p], f"{prefill}.{p}") for k in combo for p in _PORTS[k]]
    edges += [
        E("input.input_ids", f"{prefill}.input_ids"),
        E(f"{prefill}.token", "decode.token"),
        E(f"{prefill}.prompt_ids", f"{TALKER_MEDIA}.prompt_ids"),
        E(f"{prefill}.embeds", f"{TALKER_MEDIA}.prompt_embeds"),
        E(f"{prefill}.hidden", f"{TALKER_MEDIA}.prompt_hidden"),
        E(f"{prefill}.image_grids", f"{TALKER_MEDIA}.image_grids"),
        StreamingGraphEdge("decode.embeds", f"{TALKER_MEDIA}.embeds", chunk_policy=FixedChunk(1),
                           continue_after_producer_done=True),
        StreamingGraphEdge(f"{TALKER_MEDIA}.codes", "code2wav.codes", chunk_policy=frames,
                           max_buffered=max(4096, frames.min_buffer)),
        E(f"{prefill}.token", "output.first_token"),
        E("decode.token", "output.token"),
        E(f"{TALKER_MEDIA}.codes", "output.codes"),
        E("code2wav.audio", "output.audio"),
    ]
    return Walk("speak_" + "_".join(combo), Sequential(front, prefill, decode, talk, "code2wav"), edges)


def media_walk_name(inputs, default: str) -> str:
    """The walk of a request with these inputs: its media's speak walk, else `default`."""
    combo = [k for k in KINDS if k in inputs]
    return "speak_" + "_".join(combo) if combo else default
