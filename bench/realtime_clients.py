"""The clients bench.realtime drives, one turn each: the official openai SDK over
/v1/realtime, /v1/chat/completions with the whole history (its baseline), and the
conductor's gRPC Session stream (client.conversation); and a client's playback clock.

A turn is a spoken user clip (PCM16 mono at 24 kHz): committed first, then answered; its
time to first audio runs from the moment the response is asked for (the clip is in the
conversation by then) to its first audio delta.
"""
from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass, field

RATE = 24000
PCM = {"type": "audio/pcm", "rate": RATE}


def clip(seconds: float, seed: int = 0) -> bytes:
    """`seconds` of speech-like sound (bench.speech_like) as PCM16 bytes, with a little
    noise of its own: vowels() has four syllable orders, and two equal clips would hit
    the thinker's prefix cache (one turn then costs less than another for no reason of
    its own)."""
    import numpy as np

    from bench.speech_like import pcm16, vowels

    noise = np.random.default_rng(seed).normal(0.0, 0.01, int(seconds * RATE)).astype(np.float32)
    return pcm16(vowels(seconds, seed=seed) + noise)


@dataclass
class Playback:
    """A client that plays each delta when it arrives, in real time, from the first
    delta on: a stall is a delta that arrives after what came before it has all played."""
    start: float = 0.0        # perf_counter() of the first delta
    samples: int = 0          # samples received so far
    stalls: int = 0
    arrivals: list = field(default_factory=list)   # (perf_counter(), samples) per delta

    def add(self, now: float, samples: int) -> None:
        if not self.arrivals:
            self.start = now
        elif now > self.start + self.samples / RATE:
            self.stalls += 1
            self.start = now - self.samples / RATE   # playback resumes with this delta
        self.samples += samples
        self.arrivals.append((now, samples))

    def played_ms(self, now: float) -> int:
        """Milliseconds played by `now` (at most what was received)."""
        if not self.arrivals:
            return 0
        return int(1000 * min(self.samples / RATE, now - self.start))


def sdk(url: str):
    """The official openai SDK's client of the gateway at url (its realtime.connect: /v1/realtime)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def session_update(params: dict, turn_detection: dict | None = None) -> dict:
    """A session.update's session: audio out, 24 kHz PCM both ways, params as extension
    keys (max_output_tokens, max_frames, ...)."""
    return {"type": "realtime", "output_modalities": ["audio"], **params,
            "audio": {"input": {"format": PCM, "turn_detection": turn_detection},
                      "output": {"format": PCM, "voice": "ethan"}}}


@dataclass
class Heard:
    """One response as a client heard it."""
    ttfa_s: float = 0.0
    transcript: str = ""
    status: str = ""
    item_id: str = ""
    prompt_tokens: int = 0     # the turn's whole prompt, and of it what the thinker did not compute again
    cached_tokens: int = 0
    playback: Playback = field(default_factory=Playback)


async def recv_until(conn, kind: str, timeout_s: float = 300.0):
    """The next event of type `kind` (others are dropped; an error event raises)."""
    import asyncio

    while True:
        event = await asyncio.wait_for(conn.recv(), timeout_s)
        if event.type == "error":
            raise RuntimeError(f"error event: {event.error}")
        if event.type == kind:
            return event


async def ws_turn(conn, pcm: bytes) -> Heard:
    """One spoken turn over the SDK's realtime connection (turn detection off)."""
    await conn.input_audio_buffer.append(audio=base64.b64encode(pcm).decode())
    await conn.input_audio_buffer.commit()
    await recv_until(conn, "conversation.item.done")   # the clip is a user item of the conversation
    t0 = time.perf_counter()
    await conn.response.create()
    return await ws_response(conn, t0)


async def ws_response(conn, t0: float, timeout_s: float = 300.0) -> Heard:
    """Reads one response's events until response.done."""
    import asyncio

    heard = Heard()
    while True:
        event = await asyncio.wait_for(conn.recv(), timeout_s)
        now = time.perf_counter()
        if event.type == "error":
            raise RuntimeError(f"error event: {event.error}")
        if event.type == "response.output_item.added":
            heard.item_id = event.item.id
        elif event.type == "response.output_audio.delta":
            if not heard.playback.arrivals:
                heard.ttfa_s = now - t0
            heard.playback.add(now, len(base64.b64decode(event.delta)) // 2)
        elif event.type == "response.output_audio_transcript.delta":
            heard.transcript += event.delta
        elif event.type == "response.done":
            heard.status, usage = event.response.status, event.response.usage
            if usage is not None:
                heard.prompt_tokens, heard.cached_tokens = usage.input_tokens, usage.input_token_details.cached_tokens
            return heard


def wav(pcm: bytes) -> bytes:
    from gateway.audio_encoding import wav_header

    return wav_header(RATE, len(pcm) // 2) + pcm


async def chat_turn(http, url: str, model: str, history: list, pcm: bytes, params: dict) -> Heard:
    """The baseline's turn: the whole history plus this clip as one streamed
    /v1/chat/completions request (audio out, pcm16); the answer's transcript joins the
    history as an assistant message."""
    history.append({"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav(pcm)).decode(), "format": "wav"}}]})
    body = {"model": model, "messages": history, "stream": True, "modalities": ["text", "audio"],
            "audio": {"voice": "ethan", "format": "pcm16"}, "max_tokens": params["max_output_tokens"],
            "stream_options": {"include_usage": True},
            **{k: v for k, v in params.items() if k != "max_output_tokens"}}
    heard, t0 = Heard(status="completed"), time.perf_counter()
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"chat completions: {response.status_code} {await response.aread()!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                heard.prompt_tokens = chunk["usage"]["prompt_tokens"]
                heard.cached_tokens = (chunk["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            choices = chunk.get("choices") or [{}]
            delta = choices[0].get("delta") or {}
            if delta.get("audio", {}).get("data"):
                if not heard.playback.arrivals:
                    heard.ttfa_s = now - t0
                heard.playback.add(now, len(base64.b64decode(delta["audio"]["data"])) // 2)
            heard.transcript += delta.get("content") or ""
    history.append({"role": "assistant", "content": heard.transcript})
    return heard


async def grpc_turn(conv, pcm: bytes) -> float:
    """The same turn over the conductor's Session stream: seconds from create_response to
    the first audio output; the rest of the response is read to its end."""
    from protos.starmesh.v1 import session_pb2 as pb

    await conv.append_audio(pcm)
    await conv.commit_audio()
    await conv.next(lambda e: e.WhichOneof("kind") == "item_done")
    t0 = time.perf_counter()
    await conv.send(create_response=pb.ResponseCreate())
    first = await conv.next(lambda e: e.WhichOneof("kind") == "output" and e.output.WhichOneof("part") == "audio")
    ttfa = time.perf_counter() - t0
    await conv.next(lambda e: e.WhichOneof("kind") == "response_done"
                    and e.response_done.response_id == first.output.response_id)
    conv.pending.clear()
    return ttfa
