"""The speech model as the conductor serves it: the walk graph plus a placement.

Split (one service per component) or co-located (talker and code2wav in one process):
the graph is the same; only where the nodes run differs.
"""
from __future__ import annotations

import dataclasses

from core.input_spec import MEDIA_SPECS, TOKEN_IDS, specs_for
from conductor.model import ServedModel
from conductor.placement import Placement
from pipelines.prompt_format import ChatTemplate
from core.pace import NodePace
from engine.models.qwen3_omni import FRAME_SAMPLES, SAMPLE_RATE
from graph.walk import WalkGraph
from pipelines.qwen3_omni.graph import INNER_LOOPS, OUTPUT_KINDS, speech_graph
from pipelines.qwen3_omni.media_walks import MEDIA_ENCODER, PREFILL_MEDIA, TALKER_MEDIA
from pipelines.qwen3_omni.params import SpeechParams

# A voice client's text deltas wait for its next audio chunk, up to this many: captions
# stay ahead of the speech, and a burst of streams sends an eighth of the text messages.
HELD_TEXT = 8


def speech_placement(thinker: list[str], talker: list[str], codec: list[str] | None = None,
                     encoder: list[str] | None = None) -> Placement:
    """codec None: code2wav runs in the talker's processes (co-located); encoder: replicas
    of the encoder service (node media_encoder), None: no media walks."""
    services = {"thinker": {"replicas": thinker}, "talker": {"replicas": talker}}
    where = {"prefill": "thinker", "decode": "thinker", "talker": "talker", "code2wav": "talker"}
    if codec is not None:
        services["codec"] = {"replicas": codec}
        where["code2wav"] = "codec"
    if encoder is not None:
        services["encoder"] = {"replicas": encoder}
        where[MEDIA_ENCODER] = "encoder"
    return Placement.from_dict({"services": services, "placement": where,
                                "kv_contexts": {"thinker": ["prefill", "decode"]}})


def speech_model(name: str, placement: Placement, chunk_size: int = 300, left_context: int = 25,
                 first_chunk: int = 0) -> ServedModel:
    """With `media_encoder` placed, requests carrying media parts take the media walks;
    prefill_media runs where `prefill` does, talker_media where `talker` does."""
    media = MEDIA_ENCODER in placement.node_to_service
    graph = speech_graph(chunk_size, left_context, first_chunk, name=name, media=media)
    return served_speech_model(name, graph, with_media_nodes(placement) if media else placement,
                               lead_frames=chunk_size)


def with_media_nodes(placement: Placement) -> Placement:
    """`placement` with the media walks' thinker and talker nodes beside prefill and talker."""
    where = dict(placement.node_to_service)
    for node, beside in ((PREFILL_MEDIA, "prefill"), (TALKER_MEDIA, "talker")):
        if beside in where:  # else validate names the unplaced node the file left out
            where.setdefault(node, where[beside])
    groups = {g: tuple(nodes) + ((PREFILL_MEDIA,) if "prefill" in nodes and PREFILL_MEDIA not in nodes else ())
              for g, nodes in placement.kv_contexts.items()}
    return dataclasses.replace(placement, node_to_service=where, kv_contexts=groups)


def served_speech_model(name: str, graph: WalkGraph, placement: Placement, lead_frames: int = 0) -> ServedModel:
    """A speech walk graph (streaming or stage-by-stage) as the conductor serves it: loops
    inside the thinker and the talker, SpeechParams, text, codes and audio out, and the
    deadlines of its nodes (speech_pacing)."""
    return ServedModel(name, graph, placement, INNER_LOOPS, params=SpeechParams, output_kinds=OUTPUT_KINDS,
                       sample_rate=SAMPLE_RATE, tokenizer_node="prefill", prompt=ChatTemplate(),
                       voice_param="speaker", read_voices=speakers, pacing=speech_pacing(graph, lead_frames),
                       max_held_text=HELD_TEXT, input_specs=specs_for(graph, {"input_ids": TOKEN_IDS, **MEDIA_SPECS}))


def speech_pacing(graph: WalkGraph, lead_frames: int) -> dict[str, NodePace]:
    """Every item of the speech path is one codec frame of audio: a thinker token feeds one
    talker frame (its text row), a talker frame is a frame, a code2wav chunk run's items
    are frames. The thinker and the talker work `lead_frames` ahead (a frame is decoded
    only once its chunk of up to C frames is complete); code2wav's chunk is due when its
    first new frame plays."""
    frame_s = FRAME_SAMPLES / SAMPLE_RATE  # 0.08 s: 12.5 frames per second
    ahead, now = NodePace(frame_s, lead_frames), NodePace(frame_s)
    return {n.name: now if n.name == "code2wav" else ahead for n in graph.nodes
            if n.name in ("prefill", "decode", "talker", "code2wav", PREFILL_MEDIA, TALKER_MEDIA)}


def speakers(checkpoint_dir: str) -> tuple[str, ...]:
    """The talker voices the checkpoint's config names (talker_config.speaker_id)."""
    from engine.models.qwen3_omni.talker_loader import read_talker_spec

    return tuple(sorted(read_talker_spec(checkpoint_dir).speakers))
