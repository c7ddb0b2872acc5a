"""The streaming speech call of the SDK: text ids, codec frames and audio chunks as they
arrive from the conductor, and a summary (time to first audio, real-time factor).

    async for ev in speak_stream("127.0.0.1:50050", "qwen3-omni", prompt_ids):
        if ev.kind == "audio": play(ev.value)             # float32 [S] at SAMPLE_RATE
    summary = await speak("127.0.0.1:50050", "qwen3-omni", prompt_ids, on_event=...)

The conductor is a HOST:PORT (plaintext, the key from $STARMESH_API_KEY if set) or a
client.connection.Connection (its key and TLS).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

from client.connection import Connection
from pipelines.qwen3_omni.graph import OUTPUT_KINDS as KINDS  # output name -> "text", "codes" or "audio"
from pipelines.qwen3_omni.model import SAMPLE_RATE


@dataclass(frozen=True)
class SpeechEvent:
    kind: str          # "text" (token ids), "codes" (one frame [G]) or "audio" (float32 [S])
    value: object
    t_s: float         # seconds since the request was sent


@dataclass
class SpeechSummary:
    text_ids: list[int] = field(default_factory=list)
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


def _tensor(event):
    """The event's tensor (the conductor sends client outputs by value)."""
    from transport.codec import view
    from transport.ref_proto import ref_from_proto

    ref = ref_from_proto(event.tensor.tensor, f"event.tensor[{event.tensor.name}]")
    return view(ref.location.data, ref.dtype, ref.shape).clone()


async def speak_stream(conductor: "str | Connection", model: str, input_ids: list[int], params: dict | None = None,
                       request_id: str = "", timeout_s: float | None = None) -> AsyncIterator[SpeechEvent]:
    """Yields the request's events in order; raises grpc.aio.AioRpcError on failure."""
    from protos.starmesh.v1 import conductor_pb2 as pb
    from protos.starmesh.v1 import conductor_pb2_grpc

    req = pb.GenerateRequest(model=model, request_id=request_id, input_ids=list(input_ids))
    req.params.update(params or {})
    conn = conductor if isinstance(conductor, Connection) else Connection.from_env(conductor)
    t0 = time.perf_counter()
    async with conn.aio_channel() as channel:
        async for ev in conductor_pb2_grpc.ConductorStub(channel).Generate(req, timeout=timeout_s):
            if ev.WhichOneof("kind") != "tensor" or ev.tensor.name not in KINDS:
                continue
            kind, value = KINDS[ev.tensor.name], _tensor(ev)
            if kind in ("text", "codes"):
                value = value.reshape(-1).tolist()
            else:
                value = value.reshape(-1).float()
            yield SpeechEvent(kind, value, time.perf_counter() - t0)


async def speak(conductor: "str | Connection", model: str, input_ids: list[int], params: dict | None = None,
                on_event: Callable[[SpeechEvent], None] | None = None, **kwargs) -> SpeechSummary:
    """Runs one request to the end; `on_event` sees every event as it arrives."""
    summary = SpeechSummary()
    t0 = time.perf_counter()
    async for ev in speak_stream(conductor, model, input_ids, params, **kwargs):
        if on_event is not None:
            on_event(ev)
        if ev.kind == "text":
            summary.text_ids += ev.value
        elif ev.kind == "codes":
            summary.codec_codes.append(ev.value)
        else:
            summary.chunks.append(ev.value)
            summary.chunk_times_s.append(ev.t_s)
    summary.wall_s = time.perf_counter() - t0
    return summary
