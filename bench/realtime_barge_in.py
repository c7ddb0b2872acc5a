"""One barge-in as a voice client lives it, for bench.realtime: a microphone that sends
audio in real time (20 ms appends, each sent when its last sample would have been
captured) with server VAD on; the client asks (speech, then silence: the VAD commits it
and a long response starts), plays the answer's deltas in real time, and once it has
played PLAYED_BEFORE_S speaks over it. The figures, from the first sample of that speech
(its position in the sent audio, on the microphone's clock):
- stop: to the arrival of the cancelled response's last audio delta; 0 when none came
  after the speech began (audio comes in code2wav windows, 2 s of it at a time here, so
  the cancel often lands between two);
- detected: to the arrival of input_audio_buffer.speech_started (a client stops its
  playback there);
- done: to the arrival of the cancelled response's response.done (no audio can follow).
The client then truncates the answer at what it played, as a client does.
"""
from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field

from bench.realtime_clients import RATE, Playback, clip, recv_until, sdk, session_update

CHUNK = 480                # 20 ms of samples per append
LEAD_S, ASK_S, INTERRUPT_S = 0.3, 1.0, 1.0
PLAYED_BEFORE_S = 1.0      # the answer played before the client speaks over it
VAD = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 400,
       "create_response": True, "interrupt_response": True}


@dataclass
class _State:
    start: float = 0.0                 # the microphone clock's zero (perf_counter)
    speech_at: float | None = None     # when the interrupting speech's first sample was captured
    response_id: str = ""              # the response spoken over
    item_id: str = ""
    playback: Playback = field(default_factory=Playback)
    last_delta: float = 0.0
    detected: float = 0.0              # speech_started's arrival after the interruption began
    done: float = 0.0                  # the spoken-over response's response.done arrival


async def _microphone(conn, state: _State) -> None:
    """Sends silence, the question, silence until the answer has played PLAYED_BEFORE_S,
    the interruption, then silence, each 20 ms chunk at its real time."""
    ask, interrupt = clip(ASK_S, seed=0), clip(INTERRUPT_S, seed=1)
    quiet = bytes(2 * CHUNK)
    lead = int(LEAD_S * RATE) // CHUNK
    state.start = time.perf_counter()
    spoken, i = None, 0   # spoken: the chunk index where the interruption began
    while True:
        due = state.start + (i + 1) * CHUNK / RATE
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        if lead <= i < lead + len(ask) // (2 * CHUNK):
            chunk = ask[2 * CHUNK * (i - lead):2 * CHUNK * (i - lead + 1)]
        elif spoken is None and state.playback.arrivals and \
                time.perf_counter() >= state.playback.start + PLAYED_BEFORE_S:
            spoken = i
            state.speech_at = state.start + i * CHUNK / RATE
            chunk = interrupt[:2 * CHUNK]
        elif spoken is not None and 2 * CHUNK * (i - spoken) < len(interrupt):
            chunk = interrupt[2 * CHUNK * (i - spoken):2 * CHUNK * (i - spoken + 1)]
        else:
            chunk = quiet
        await conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
        i += 1


async def _listen(conn, state: _State, timeout_s: float) -> str:
    """Reads events until the first response is done; its status."""
    while True:
        event = await asyncio.wait_for(conn.recv(), timeout_s)
        now = time.perf_counter()
        if event.type == "error":
            raise RuntimeError(f"error event: {event.error}")
        if event.type == "response.created" and not state.response_id:
            state.response_id = event.response.id
        elif event.type == "response.output_item.added" and not state.item_id:
            state.item_id = event.item.id
        elif event.type == "response.output_audio.delta" and event.response_id == state.response_id:
            state.playback.add(now, len(base64.b64decode(event.delta)) // 2)
            state.last_delta = now
        elif event.type == "input_audio_buffer.speech_started" and state.speech_at is not None \
                and not state.detected:
            state.detected = now
        elif event.type == "response.done" and event.response.id == state.response_id:
            state.done = now
            return event.response.status


async def barge_in_ms(url: str, model: str, params: dict, timeout_s: float = 120.0) -> dict[str, float]:
    """One round on a fresh connection: {stop, detected, done} in milliseconds (above)."""
    async with sdk(url).realtime.connect(model=model) as conn:
        await conn.session.update(session=session_update(params, VAD))
        await recv_until(conn, "session.updated")
        state = _State()
        mic = asyncio.create_task(_microphone(conn, state))
        try:
            status = await _listen(conn, state, timeout_s)
            played = state.playback.played_ms(time.perf_counter())
            if status != "cancelled" or state.speech_at is None:
                raise RuntimeError(f"the answer was not interrupted: status {status!r}, "
                                   f"speech sent {state.speech_at is not None}")
            await conn.conversation.item.truncate(item_id=state.item_id, content_index=0, audio_end_ms=played)
            await recv_until(conn, "conversation.item.truncated")
        finally:
            mic.cancel()
            await asyncio.gather(mic, return_exceptions=True)
    return {"stop": 1000 * max(0.0, state.last_delta - state.speech_at),
            "detected": 1000 * (state.detected - state.speech_at), "done": 1000 * (state.done - state.speech_at)}
