"""/v1/realtime over the real mesh (tests/gateway/gateway_mesh.py: the tiny Qwen3-Omni
behind a conductor serving `Sessions`): the official `openai` SDK holds a spoken
conversation (a text turn, then an audio turn), and what it hears is exactly what the
same conversation gives over the conductor's gRPC Session stream (client.conversation):
the gateway only translates. The second turn continues the kept conversation."""
from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest

from gateway.audio_encoding import pcm16
from tests.gateway.gateway_mesh import KEY

pytestmark = pytest.mark.timeout(300)
PCM = {"type": "audio/pcm", "rate": 24000}
PARAMS = {"max_new_tokens": 8, "max_frames": 10, "min_frames": 10}
SPEECH = (0.3 * np.sin(2 * np.pi * 300 * np.arange(14400) / 24000 * (1 + np.arange(14400) / 28800)) * 32767
          ).astype("<i2").tobytes()   # 0.6 s of a rising tone, 16-bit PCM at 24 kHz


async def _until_done(conn) -> list:
    events = []
    while True:
        events.append(await asyncio.wait_for(conn.recv(), 240))
        if events[-1].type == "error":
            raise AssertionError(events[-1].error)
        if events[-1].type == "response.done":
            return events


def _heard(events) -> tuple[bytes, str, object]:
    """(16-bit PCM, transcript, response.done's response) of one response's events."""
    audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
    words = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
    return audio, words, events[-1].response


async def _over_websocket(url: str):
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    async with client.realtime.connect(model="omni") as conn:
        await conn.session.update(session={
            "type": "realtime", "output_modalities": ["audio"], "max_output_tokens": PARAMS["max_new_tokens"],
            "audio": {"input": {"format": PCM, "turn_detection": None}, "output": {"format": PCM, "voice": "ethan"}},
            "max_frames": PARAMS["max_frames"], "min_frames": PARAMS["min_frames"]})
        await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                  "content": [{"type": "input_text", "text": "Hello there"}]})
        await conn.response.create()
        events = await _until_done(conn)
        first = _heard(events)
        updated = next(e for e in events if e.type == "session.updated").session
        assert updated.audio.input.turn_detection is None and updated.audio.output.voice == "ethan", updated
        assert updated.model == "omni" and updated.output_modalities == ["audio"], updated
        await conn.input_audio_buffer.append(audio=base64.b64encode(SPEECH).decode())
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        return first, _heard(await _until_done(conn))


async def _over_grpc(conductor: str):
    from client.connection import Connection
    from client.session import ConductorSession

    async with ConductorSession(Connection(conductor, KEY)) as session:
        async with session.conversation("omni", ("audio",), voice="ethan", input_sample_rate=24000,
                                        params=PARAMS) as conv:
            await conv.say("Hello there")
            first = await conv.respond()
            await conv.append_audio(SPEECH)
            await conv.commit_audio()
            return first, await conv.respond()


def test_the_sdk_hears_what_the_session_stream_says(mesh):
    heard = asyncio.run(_over_websocket(mesh.url))
    said = asyncio.run(_over_grpc(mesh.conductor))
    for turn, ((audio, words, response), answer) in enumerate(zip(heard, said)):
        assert response.status == "completed", (turn, response)
        assert len(audio) > 0 and audio == pcm16(b"".join(answer.audio)), turn
        assert words == answer.text, turn
        usage = answer.usage
        assert (response.usage.input_tokens, response.usage.output_tokens) == \
            (usage.prompt_tokens, usage.completion_tokens), turn
    # the audio turn continued the conversation the text turn left in the thinker's cache
    assert heard[1][2].usage.input_token_details.cached_tokens > 0


LONG = {"max_output_tokens": 8, "max_frames": 2000, "min_frames": 2000}   # 160 s of audio: outlives each step
SESSION = {"type": "realtime", "output_modalities": ["audio"], **LONG,
           "audio": {"input": {"format": PCM, "turn_detection": None}, "output": {"format": PCM}}}


def _idle(mesh) -> bool:
    from tests.fixtures.services import describe

    return not any(describe(p.address).num_open_requests for p in mesh.procs)


def test_cancel_and_truncate_reach_the_conductor(mesh):
    from openai import AsyncOpenAI

    async def interrupted():
        client = AsyncOpenAI(base_url=f"{mesh.url}/v1", api_key=KEY, max_retries=0)
        async with client.realtime.connect(model="omni") as conn:
            await conn.session.update(session=SESSION)
            await conn.conversation.item.create(item={"type": "message", "role": "user",
                                                      "content": [{"type": "input_text", "text": "Hello there"}]})
            await conn.response.create()
            events = []
            while not events or events[-1].type != "response.output_audio.delta":
                events.append(await asyncio.wait_for(conn.recv(), 240))
            await conn.response.cancel(event_id="ev_cancel")
            events += await _until_done(conn)
            item = next(e.item.id for e in events if e.type == "response.output_item.added")
            await conn.conversation.item.truncate(item_id=item, content_index=0, audio_end_ms=80)
            while (event := await asyncio.wait_for(conn.recv(), 240)).type != "conversation.item.truncated":
                assert event.type != "error", event
            return events[-1].response, event, item

    response, truncated, item = asyncio.run(interrupted())
    assert response.status == "cancelled" and response.status_details.type == "cancelled"
    assert (truncated.item_id, truncated.audio_end_ms) == (item, 80)
    from tests.fixtures.services import wait_until

    assert wait_until(lambda: _idle(mesh), 60), "the cancelled answer still runs in the mesh"


def test_a_stalled_client_leaves_nothing_running_in_the_mesh(mesh):
    """A client that stops reading mid-answer (a gateway with a 64 KiB send queue): it is
    disconnected, and the services hold no request of its session afterwards."""
    import json
    import socket

    import httpx
    from websockets.sync.client import connect

    from runtime.process import ServiceProcess
    from tests.fixtures.services import wait_until

    args = ["--conductor", mesh.conductor, "--host", "127.0.0.1", "--realtime-send-queue-mb", "0.0625"]
    with ServiceProcess("", args, name="gateway", command="gateway") as gateway:
        # a small receive buffer: the kernel does not hold megabytes the client never reads
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.connect(("127.0.0.1", gateway.port))
        url = f"ws://127.0.0.1:{gateway.port}/v1/realtime?model=omni"
        with connect(url, sock=sock, max_queue=4, ping_interval=None, close_timeout=1, open_timeout=60,
                     additional_headers={"Authorization": f"Bearer {KEY}"}) as conn:
            for event in ({"type": "session.update", "session": SESSION},
                          {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                              {"type": "input_text", "text": "Hello there"}]}},
                          {"type": "response.create"}):
                conn.send(json.dumps(event))

            def stalled() -> bool:
                metrics = httpx.get(f"http://127.0.0.1:{gateway.port}/metrics", timeout=30).text
                return 'starmesh_gateway_realtime_closes_total{outcome="client_not_reading"} 1.0' in metrics

            assert wait_until(stalled, 120), "the client that stopped reading was not disconnected"
        assert wait_until(lambda: _idle(mesh), 60), "the stalled client's answer still runs in the mesh"
