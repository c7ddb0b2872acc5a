"""The streaming speech call of the SDK: text ids, codec frames and audio chunks as they
arrive from the conductor, and a summary (time to first audio, real-time factor).

    async for ev in speak_stream("127.0.0.1:50050", "qwen3-omni", prompt_ids):
        if ev.kind == "audio": play(ev.value)             # float32 [S] at SAMPLE_RATE
    summary = await speak("127.0.0.1:50050", "qwen3-omni", prompt_ids, on_event=...)

The conductor is a HOST:PORT (plaintext, the key from $STARMESH_API_KEY if set), a
client.connection.Connection (its key and TLS): each call then opens and closes a channel
of its own; or an open grpc.aio channel (`Connection.aio_channel()`), which many calls
share and which stays open: concurrent requests then skip a connection setup each.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Sequence

from client.connection import Connection
from client.events import tensor_of
from client.generate_call import GenerateCall, Media, Message
from pipelines.qwen3_omni.graph import OUTPUT_KINDS as KINDS  # output name -> "text", "codes" or "audio"
from pipelines.qwen3_omni.model import SAMPLE_RATE


@dataclass(frozen=True)
class SpeechEvent:
    kind: str          # "text" (token ids), "codes" (one frame [G]) or "audio" (float32 [S])
    value: object
    t_s: float         # seconds since the request was sent
    text: str = ""     # for "text": the decoded text these ids complete (the server's tokenizer)


@dataclass
class SpeechSummary:
    text_ids: list[int] = field(default_factory=list)
    text: str = ""
    codec_codes: list[list[int]] = field(default_factory=list)
    chunks: list = field(default_factory=list)     # float32 [S_i] tensors, in order
    chunk_times_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def audio_s(self) -> float:
        return sum(int(c.numel()) for c in self.chunks) / SAMPLE_RATE

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


def speech_event(ev, t_s: float) -> SpeechEvent | None:
    """A GenerateEvent as a SpeechEvent: TextDelta ids, AudioChunk samples, the codes tensor."""
    import numpy as np
    import torch

    which = ev.WhichOneof("kind")
    if which == "text":
        return SpeechEvent("text", list(ev.text.token_ids), t_s, ev.text.text)
    if which == "audio":
        samples = torch.from_numpy(np.frombuffer(ev.audio.samples, dtype="<f4").copy())  # [S] float32
        return SpeechEvent("audio", samples, t_s)
    if which == "tensor" and KINDS.get(ev.tensor.name) == "codes":
        return SpeechEvent("codes", tensor_of(ev.tensor).reshape(-1).tolist(), t_s)
    return None


def _channel_of(conductor):
    """An async context giving the grpc.aio channel to call on: a caller's open channel
    as it is (it stays open: one channel serves many calls, as HTTP/2 multiplexes them),
    else a new one to `conductor` (an address or a Connection), closed after the call."""
    import grpc

    if isinstance(conductor, grpc.aio.Channel):
        return contextlib.nullcontext(conductor)
    conn = conductor if isinstance(conductor, Connection) else Connection.from_env(conductor)
    return conn.aio_channel()


async def speak_stream(conductor: "str | Connection | grpc.aio.Channel", model: str,
                       input_ids: list[int] | None = None,
                       params: dict | None = None, request_id: str = "", timeout_s: float | None = None,
                       text: str = "", audio: bytes | None = None, image: bytes | None = None,
                       video: bytes | None = None, text_only: bool = False,
                       audio_only: bool = False, modalities: Sequence[str] = ()) -> AsyncIterator[SpeechEvent]:
    """Yields the request's events in order; raises grpc.aio.AioRpcError on failure. The
    prompt is `input_ids` (chat-formatted ids), or `text` for the server's chat template;
    `audio` (WAV bytes), `image` (PNG/JPEG bytes) and/or `video` (animated GIF bytes) make
    it one user message with those parts before the text. modalities: what to send back,
    of "text", "audio", "image" (empty: every output, codec codes included); ("text",
    "audio") is what a voice client needs, and what the HTTP gateway's chat asks for: the
    codes then stay on their services. text_only / audio_only add "text" / "audio" (text
    alone: the model runs no talker and no code2wav)."""
    from protos.starmesh.v1 import conductor_pb2_grpc

    wanted = tuple(dict.fromkeys((*modalities, *("text",) * text_only, *("audio",) * audio_only)))
    parts = [Media(kind, data) for kind, data in (("audio", audio), ("image", image), ("video", video))
             if data is not None]
    call = GenerateCall(model, text="" if parts else text, input_ids=tuple(input_ids or ()), params=params or {},
                        messages=(Message("user", (*parts, *([text] if text else []))),) if parts else (),
                        output_modalities=wanted, request_id=request_id)  # checks the modalities
    req = call.to_proto()
    t0 = time.perf_counter()
    async with _channel_of(conductor) as channel:
        async for batch in conductor_pb2_grpc.ConductorStub(channel).GenerateBatches(req, timeout=timeout_s):
            for ev in batch.events:
                event = speech_event(ev, time.perf_counter() - t0)
                if event is not None:
                    yield event


async def speak(conductor: "str | Connection | grpc.aio.Channel", model: str, input_ids: list[int] | None,
                params: dict | None = None,
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
    summary.wall_s = time.perf_counter() - t0
    return summary
