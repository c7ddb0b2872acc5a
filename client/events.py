"""The conductor's typed events as dataclasses: what a front end (the HTTP gateway, an
application) reads without touching protobuf.

    async for event in session.generate(call):
        if isinstance(event, AudioChunk): play(event.samples, event.sample_rate)

Audio stays bytes (float32 little-endian, as the wire carries it): a front end that
re-encodes it (PCM16, WAV) converts once, with no tensor in between. A raw tensor output
arrives as a numpy array (client.tensors): nothing here imports torch or numpy until a
tensor event arrives, so a text or audio front end never loads them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TextDelta:
    token_ids: tuple[int, ...]
    text: str              # may be "" while a character's bytes are incomplete


@dataclass(frozen=True)
class AudioChunk:
    samples: bytes         # mono float32 little-endian in [-1, 1]: num_samples * 4 bytes
    sample_rate: int
    sequence_number: int
    num_samples: int

    def array(self):
        """The samples as a float32 numpy array [num_samples] (numpy imported on first use)."""
        import numpy as np

        return np.frombuffer(self.samples, dtype="<f4").astype(np.float32)


@dataclass(frozen=True)
class Image:
    data: bytes            # encoded (mime_type), 8-bit RGB
    mime_type: str
    width: int
    height: int
    index: int


@dataclass(frozen=True)
class Step:
    node: str
    step: int
    num_steps: int


@dataclass(frozen=True)
class RawTensor:
    name: str              # the walk output's name (ModelCard.outputs gives its kind)
    value: Any             # a numpy array owning its bytes (bfloat16 widened to float32)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    audio_seconds: float = 0.0
    time_to_first_audio_ms: float = 0.0
    real_time_factor: float = 0.0
    latency_ms: float = 0.0
    metrics: dict = field(default_factory=dict)
    context_id: str = ""           # the kept context (params keep_context), continued with params context_id
    cached_prompt_tokens: int = 0  # prompt tokens whose KV came from the cache


Event = TextDelta | AudioChunk | Image | Step | RawTensor | Usage


def event_from_proto(ev) -> Event | None:
    """A starmesh.v1.GenerateEvent as its dataclass (None for an empty event)."""
    which = ev.WhichOneof("kind")
    if which == "text":
        return TextDelta(tuple(ev.text.token_ids), ev.text.text)
    if which == "audio":
        a = ev.audio
        return AudioChunk(a.samples, a.sample_rate, a.sequence_number, a.num_samples)
    if which == "image":
        i = ev.image
        return Image(i.data, i.mime_type, i.width, i.height, i.index)
    if which == "step":
        return Step(ev.step.node, ev.step.step, ev.step.num_steps)
    if which == "usage":
        return _usage(ev.usage)
    if which == "tensor":
        from client.tensors import array_of

        return RawTensor(ev.tensor.name, array_of(ev.tensor))
    return None


def _usage(u) -> Usage:
    from google.protobuf.json_format import MessageToDict

    return Usage(u.prompt_tokens, u.completion_tokens, u.audio_seconds, u.time_to_first_audio_ms,
                 u.real_time_factor, u.latency_ms, MessageToDict(u.metrics), u.context_id, u.cached_prompt_tokens)

