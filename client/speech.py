"""The streaming speech call of the SDK: text ids, codec frames and audio chunks as they
arrive from the conductor, and a summary (time to first audio, real-time factor).

    async for ev in speak_stream("127.0.0.1:50050", "omni", prompt_ids):
        if ev.kind == "audio": play(ev.value, ev.sample_rate)    # float32 [S]
    summary = await speak("127.0.0.1:50050", "omni", prompt_ids, on_event=...)

A thin layer over client.session (the request) and client.events (its events): what
sets a speech model apart comes from the conductor, never from constants here. The
sample rate is the audio chunks' own; which tensor outputs are codec codes is
ListModels' (an output of kind "codes"), asked alongside the request and only when the
request may bring tensors back.

The conductor is a HOST:PORT, a client.connection.Connection or an open grpc.aio channel
(as client.session.ConductorSession takes them), or an open ConductorSession, whose
channel and token the call uses. Audio values are float32 torch tensors, as the
callers of this module compute with them: torch is imported when a call starts, never
when this module is; a program without torch reads client.session's events, whose audio
is bytes. A failure raises grpc.aio.AioRpcError (callers match on its status code).
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Sequence

from client.connection import Connection
from client.events import AudioChunk, RawTensor, TextDelta
from client.generate_call import GenerateCall, Media, Message
from client.session import ConductorSession


@dataclass(frozen=True)
class SpeechEvent:
    kind: str          # "text" (token ids), "codes" (one frame [G]) or "audio" (float32 [S])
    value: object
    t_s: float         # seconds since the request was sent
    text: str = ""     # for "text": the decoded text these ids complete (the server's tokenizer)
    sample_rate: int = 0  # for "audio": samples per second


@dataclass
class SpeechSummary:
    text_ids: list[int] = field(default_factory=list)
    text: str = ""
    codec_codes: list[list[int]] = field(default_factory=list)
    chunks: list = field(default_factory=list)     # float32 [S_i] tensors, in order
    chunk_times_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    sample_rate: int = 0                           # the audio's, as its chunks give it; 0 without audio

    @property
    def audio_s(self) -> float:
        return sum(int(c.numel()) for c in self.chunks) / self.sample_rate if self.sample_rate else 0.0

    @property
    def ttfa_ms(self) -> float | None:
        return 1000 * self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def rtf(self) -> float | None:
        """Wall time per second of audio (< 1: faster than real time)."""
        return self.wall_s / self.audio_s if self.audio_s else None

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    def as_json(self) -> dict:
        return {"text_ids": self.text_ids, "codec_codes": self.codec_codes, "ttfa_ms": self.ttfa_ms,
                "rtf": self.rtf, "audio_s": self.audio_s, "num_chunks": self.num_chunks}


def speech_call(model: str, input_ids: list[int] | None = None, params: dict | None = None, request_id: str = "",
                text: str = "", audio: bytes | None = None, image: bytes | None = None, video: bytes | None = None,
                modalities: Sequence[str] = ()) -> GenerateCall:
    """The GenerateCall of one speech request: media (WAV, PNG/JPEG, animated GIF bytes)
    make one user message with those parts before the text; else `text` or `input_ids`."""
    parts = [Media(kind, data) for kind, data in (("audio", audio), ("image", image), ("video", video))
             if data is not None]
    return GenerateCall(model, text="" if parts else text, input_ids=tuple(input_ids or ()), params=params or {},
                        messages=(Message("user", (*parts, *([text] if text else []))),) if parts else (),
                        output_modalities=tuple(modalities), request_id=request_id)  # checks the modalities


class _CodesOutputs:
    """Which tensor outputs of `model` are codec codes, from ListModels, asked at once
    (alongside the request) and read when the first tensor arrives."""

    def __init__(self, session: ConductorSession, model: str) -> None:
        self.model = model
        self.task = asyncio.ensure_future(session.models())
        self.names: set[str] | None = None

    async def is_codes(self, name: str) -> bool:
        if self.names is None:
            card = (await self.task).get(self.model)
            self.names = {n for n, kind in card.outputs.items() if kind == "codes"} if card else set()
        return name in self.names

    def close(self) -> None:
        if not self.task.done():
            self.task.cancel()
        elif not self.task.cancelled():
            self.task.exception()  # read: a failed lookup that nothing awaited is not reported as lost


def _session_of(conductor):
    """An async context giving an open session: the caller's as it is (it stays open),
    else a new one, closed after the call."""
    return contextlib.nullcontext(conductor) if isinstance(conductor, ConductorSession) else ConductorSession(conductor)


async def speak_stream(conductor: "str | Connection | grpc.aio.Channel | ConductorSession", model: str,
                       input_ids: list[int] | None = None,
                       params: dict | None = None, request_id: str = "", timeout_s: float | None = None,
                       text: str = "", audio: bytes | None = None, image: bytes | None = None,
                       video: bytes | None = None, text_only: bool = False,
                       audio_only: bool = False, modalities: Sequence[str] = ()) -> AsyncIterator[SpeechEvent]:
    """Yields the request's events in order. The prompt is `input_ids` (chat-formatted
    ids), or `text` for the server's chat template; `audio`, `image` and/or `video` make it
    one user message with those parts before the text. modalities: what to send back, of
    "text", "audio", "image" (empty: every output, codec codes included); ("text",
    "audio") is what a voice client needs, and what the HTTP gateway's chat asks for: the
    codes then stay on their services. text_only / audio_only add "text" / "audio" (text
    alone: the model runs no speech stages)."""
    import torch  # the audio values' type; imported before the request, so no event waits for it

    wanted = tuple(dict.fromkeys((*modalities, *("text",) * text_only, *("audio",) * audio_only)))
    call = speech_call(model, input_ids, params, request_id, text, audio, image, video, wanted)
    async with _session_of(conductor) as session:
        codes = _CodesOutputs(session, model) if not call.output_modalities else None
        t0 = time.perf_counter()
        try:
            async for ev in session.stream(call, timeout_s=timeout_s):
                t_s = time.perf_counter() - t0
                if isinstance(ev, TextDelta):
                    yield SpeechEvent("text", list(ev.token_ids), t_s, ev.text)
                elif isinstance(ev, AudioChunk):
                    yield SpeechEvent("audio", torch.from_numpy(ev.array()), t_s, sample_rate=ev.sample_rate)
                elif isinstance(ev, RawTensor) and codes is not None and await codes.is_codes(ev.name):
                    yield SpeechEvent("codes", ev.value.reshape(-1).tolist(), t_s)
        finally:
            if codes is not None:
                codes.close()


async def speak(conductor: "str | Connection | grpc.aio.Channel | ConductorSession", model: str,
                input_ids: list[int] | None, params: dict | None = None,
                on_event: Callable[[SpeechEvent], None] | None = None, **kwargs) -> SpeechSummary:
    """Runs one request to the end; `on_event` sees every event as it arrives."""
    summary = SpeechSummary()
    t0 = time.perf_counter()
    async for ev in speak_stream(conductor, model, input_ids, params, **kwargs):
        if on_event is not None:
            on_event(ev)
        if ev.kind == "text":
            summary.text_ids += ev.value
            summary.text += ev.text
        elif ev.kind == "codes":
            summary.codec_codes.append(ev.value)
        else:
            summary.chunks.append(ev.value)
            summary.chunk_times_s.append(ev.t_s)
            summary.sample_rate = ev.sample_rate
    summary.wall_s = time.perf_counter() - t0
    return summary
