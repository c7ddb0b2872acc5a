"""The walks of requests that carry audio, an image or a video: the encoder nodes in front
of prefill, on their own services (shareable by every model with the same towers).

    input.audio --> audio_encoder --embeds--------------------\\
    input.image --> vision_encoder --embeds, deepstack, grid---> prefill_<kinds> --> decode loop
    input.video --> video_encoder --embeds, deepstack, grid, seconds-/   |  prompt_ids, embeds, hidden,
    input.input_ids ------------------------------------------/          |  image_grids, video_grids, video_seconds
                                                                         v
                                             talker_media loop ~> code2wav -> audio

`speak_<kinds>` is that walk; `chat_<kinds>` stops at the decode loop (the same thinker
work, so the same text ids: no talker, no code2wav), for requests that want text alone.
Combinations (COMBOS): each medium alone, audio with an image, audio with a video; a
video and an image together are not taken (one vision tower node per walk keeps the
combinations few). One prefill node per combination (`prefill_audio`, `prefill_video`,
`prefill_audio_image`, ...), each with exactly the ports its walk feeds; they run on the
thinker and share its KV context with `decode`. The prompt holds one placeholder per
medium; prefill widens it to the encoder's rows and hands the talker the widened ids, its
prompt's accept-layer hidden states (the talker reads them at media positions) and the
image and video grids (its rope ids). A graph has the walks of the towers its placement
places (`audio_encoder`, `vision_encoder`, `video_encoder`); text-only requests never
enter them.
"""
from __future__ import annotations

from graph.chunking import FixedChunk, LeftContext
from graph.composites import DynamicLoop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge
from graph.node import GraphNode

AUDIO_NODE, VISION_NODE, VIDEO_NODE = "audio_encoder", "vision_encoder", "video_encoder"
TALKER_MEDIA = "talker_media"
KINDS = {"audio": AUDIO_NODE, "image": VISION_NODE, "video": VIDEO_NODE}  # walk input -> its encoder node
COMBOS = (("audio",), ("image",), ("video",), ("audio", "image"), ("audio", "video"))
TALKER_GRIDS = ("image_grids", "video_grids", "video_seconds")  # prefill -> talker_media: its rope ids
MEDIA_ROWS = ("token", "hidden", "embeds", "prompt_ids", *TALKER_GRIDS)
_OUTS = {"audio": ("embeds",), "image": ("embeds", "deepstack", "grid"), "video": ("embeds", "deepstack", "grid",
                                                                                  "seconds")}
_PORTS = {k: tuple(f"{k}_{o}" for o in outs) for k, outs in _OUTS.items()}  # e.g. video_seconds
_FROM = {f"{k}_{o}": f"{KINDS[k]}.{o}" for k, outs in _OUTS.items() for o in outs}


def prefill_node(kinds: tuple[str, ...]) -> str:
    return "prefill_" + "_".join(kinds)


def media_combinations(placed: set[str]) -> list[tuple[str, ...]]:
    """The COMBOS whose encoders are all placed, e.g. [("audio",), ("image",), ("audio", "image")]."""
    return [c for c in COMBOS if all(KINDS[k] in placed for k in c)]


def media_nodes(combos: list[tuple[str, ...]]) -> list[GraphNode]:
    kinds = {k for c in combos for k in c}
    nodes = [GraphNode(KINDS[k], (k,), _OUTS[k]) for k in KINDS if k in kinds]
    for combo in combos:
        ports = ("input_ids",) + tuple(p for k in combo for p in _PORTS[k])
        nodes.append(GraphNode(prefill_node(combo), ports, MEDIA_ROWS, stateful=True))
    if combos:
        nodes.append(GraphNode(TALKER_MEDIA, ("prompt_ids", "prompt_embeds", "prompt_hidden", *TALKER_GRIDS,
                                              "embeds"), ("codes",), stateful=True))
    return nodes


def _front(combo: tuple[str, ...]):
    """The walk's encoder nodes (in parallel when several) and the edges feeding them and prefill."""
    encoders = [KINDS[k] for k in combo]
    front = encoders[0] if len(encoders) == 1 else Parallel(*encoders)
    prefill = prefill_node(combo)
    edges = [E(f"input.{k}", f"{KINDS[k]}.{k}") for k in combo]
    edges += [E(_FROM[p], f"{prefill}.{p}") for k in combo for p in _PORTS[k]]
    return front, edges + [E("input.input_ids", f"{prefill}.input_ids"), E(f"{prefill}.token", "decode.token"),
                           E(f"{prefill}.token", "output.first_token"), E("decode.token", "output.token")]


def media_chat_walk(combo: tuple[str, ...], decode_loop: str, max_text_tokens: int):
    """The text-only walk of a request carrying the media `combo`: encoders, prefill, decode loop."""
    from graph.walk import Walk

    front, edges = _front(combo)
    decode = DynamicLoop(decode_loop, "decode", max_iters=max_text_tokens, stop=StopRule("decode.token"))
    return Walk("chat_" + "_".join(combo), Sequential(front, prefill_node(combo), decode), edges)


def media_walk(combo: tuple[str, ...], loops: tuple[str, str], chunking: tuple[int, int, int],
               max_text_tokens: int, max_frames: int):
    """The speak walk of a request carrying the media `combo`."""
    from graph.walk import Walk

    decode_loop, talker_loop = loops
    chunk_size, left_context, first_chunk = chunking
    prefill = prefill_node(combo)
    front, edges = _front(combo)
    decode = DynamicLoop(decode_loop, "decode", max_iters=max_text_tokens, stop=StopRule("decode.token"))
    talk = DynamicLoop(talker_loop, TALKER_MEDIA, max_iters=max_frames, stop=StopRule(f"{TALKER_MEDIA}.codes"))
    frames = LeftContext(chunk_size, left_context, first=first_chunk)
    edges += [E(f"{prefill}.{p}", f"{TALKER_MEDIA}.{p}") for p in ("prompt_ids", *TALKER_GRIDS)]
    edges += [
        E(f"{prefill}.embeds", f"{TALKER_MEDIA}.prompt_embeds"),
        E(f"{prefill}.hidden", f"{TALKER_MEDIA}.prompt_hidden"),
        StreamingGraphEdge("decode.embeds", f"{TALKER_MEDIA}.embeds", chunk_policy=FixedChunk(1),
                           continue_after_producer_done=True),
        StreamingGraphEdge(f"{TALKER_MEDIA}.codes", "code2wav.codes", chunk_policy=frames,
                           max_buffered=max(4096, frames.min_buffer)),
        E(f"{TALKER_MEDIA}.codes", "output.codes"),
        E("code2wav.audio", "output.audio"),
    ]
    return Walk("speak_" + "_".join(combo), Sequential(front, prefill, decode, talk, "code2wav"), edges)


def media_combo(inputs) -> tuple[str, ...]:
    """The media kinds among a request's inputs, in KINDS order (() for a text request)."""
    return tuple(k for k in KINDS if k in inputs)
