"""One turn of a session as the mesh runs it: a Generate request of the conversation's new
ids (and clips) continuing its kept context, and what comes back, as plain data.

The session logic builds a `Turn` and reads `TurnText`, `TurnAudio` and, last, the turn's
`Usage` (core.session_events); the conductor's edge runs it as its Generate requests
run (conductor.session_generate: admission, metering, the kept context's owner), so a
turn is a request like any other in the mesh.
"""
from __future__ import annotations

import io
import wave
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Mapping

from core.session_events import Clip


@dataclass(frozen=True)
class Turn:
    model: str
    input_ids: tuple[int, ...]
    clips: tuple[Clip, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    output_modalities: tuple[str, ...] = ("text",)
    request_id: str = ""
    raw_outputs: tuple[str, ...] = ()
    # filled as it runs: `keeping`, the id its result is kept under, and what its nodes
    # reported of it (a cancelled turn's thinker may have kept it all the same)
    report: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class TurnText:
    token_ids: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class TurnAudio:
    samples: bytes            # float32 little-endian
    sample_rate: int
    sequence_number: int
    num_samples: int


@dataclass(frozen=True)
class TurnRaw:
    value: Any                # a walk output named in Turn.raw_outputs, as the edge carries it


# Runs a turn: its events in order, Usage last; a StarmeshError for a failed turn.
TurnRunner = Callable[[Turn], AsyncIterator[Any]]


def wav_bytes(clip: Clip) -> bytes:
    """A clip as the WAV file the conductor's media path takes (the encoder resamples it)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(clip.sample_rate)
        w.writeframes(clip.pcm)
    return out.getvalue()
