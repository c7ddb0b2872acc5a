"""The gateway's Realtime translation, seen from both ends: the official `openai` SDK's
`client.realtime.connect` (and a raw `websockets` client, as a browser connects) against
a real gateway whose conductor is a scripted gRPC Sessions server
(tests/gateway/scripted_sessions.py): each client event becomes one SessionInput with its
event_id, each SessionEvent the GA server events, audio converted both ways."""
from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest

from gateway.audio_encoding import pcm16
from tests.gateway.scripted_sessions import CHUNK, KEY, scripted_gateway

pytestmark = pytest.mark.timeout(120)
PCM = {"type": "audio/pcm", "rate": 24000}


@pytest.fixture(scope="module")
def scripted():
    with scripted_gateway() as (url, record):
        yield url, record


def _sdk(url: str, key: str = KEY):
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


async def _until(conn, kind: str) -> list:
    """Events up to and including the first of type `kind`."""
    seen = []
    while True:
        event = await asyncio.wait_for(conn.recv(), 60)
        seen.append(event)
        if event.type == kind:
            return seen


def test_an_sdk_turn_is_translated_both_ways(scripted):
    url, record = scripted
    speech = (np.arange(4800) % 200 - 100).astype("<i2").tobytes()   # 200 ms of 16-bit PCM

    async def turn():
        async with _sdk(url).realtime.connect(model="omni") as conn:
            created = (await _until(conn, "session.created"))[-1]
            await conn.session.update(event_id="ev_update", session={
                "type": "realtime", "output_modalities": ["audio"], "instructions": "be brief",
                "audio": {"input": {"format": PCM, "turn_detection": None}, "output": {"format": PCM, "voice": "ethan"}},
                "max_output_tokens": 8, "max_frames": 10})
            updated = (await _until(conn, "session.updated"))[-1]
            for half in (speech[:4800], speech[4800:]):
                await conn.input_audio_buffer.append(audio=base64.b64encode(half).decode())
            await conn.input_audio_buffer.commit(event_id="ev_commit")
            committed = await _until(conn, "conversation.item.added")
            await conn.response.create(event_id="ev_respond")
            return created, updated, committed, await _until(conn, "response.done")

    created, updated, committed, response = asyncio.run(turn())
    assert created.session.model == "omni" and created.session.audio.output.format.rate == 24000
    assert updated.session.instructions == "be brief" and updated.session.audio.input.turn_detection is None
    assert updated.session.audio.output.voice == "ethan"
    assert [e.type for e in committed] == ["input_audio_buffer.committed", "conversation.item.added"]
    inputs = {m.event_id: m for m in record.inputs if m.event_id}
    config = inputs["ev_update"].configure
    assert config.no_turn_detection and config.voice == "ethan" and config.input_sample_rate == 24000
    assert dict(config.params) == {"max_new_tokens": 8, "max_frames": 10}
    appended = b"".join(m.append_audio for m in record.inputs if m.WhichOneof("kind") == "append_audio")
    assert appended == speech and inputs["ev_commit"].commit_audio
    assert inputs["ev_respond"].WhichOneof("kind") == "create_response"
    assert [e.type for e in response] == [
        "response.created", "response.output_item.added", "response.content_part.added",
        "response.output_audio_transcript.delta", "response.output_audio.delta",
        "response.output_audio_transcript.delta", "response.output_audio.delta",
        "response.output_audio.done", "response.output_audio_transcript.done", "response.content_part.done",
        "response.output_item.done", "response.done"]
    audio = [base64.b64decode(e.delta) for e in response if e.type == "response.output_audio.delta"]
    assert audio == [pcm16(CHUNK.tobytes())] * 2
    assert response[8].transcript == "Hi there" and response[-2].item.content[0].transcript == "Hi there"
    done = response[-1].response
    assert done.status == "completed" and done.output[0].id == response[1].item.id
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens) == (12, 3, 15)
    assert done.usage.input_token_details.cached_tokens == 5


def test_a_conductor_error_names_the_client_field_and_event(scripted):
    url, _ = scripted

    async def delete():
        async with _sdk(url).realtime.connect(model="omni") as conn:
            await _until(conn, "session.created")
            await conn.conversation.item.delete(item_id="missing", event_id="ev_delete")
            error = (await _until(conn, "error"))[-1]
            await conn.conversation.item.delete(item_id="item_9", event_id="ev_again")   # the session lives on
            return error, (await _until(conn, "conversation.item.deleted"))[-1]

    error, deleted = asyncio.run(delete())
    assert (error.error.param, error.error.event_id, error.error.code) == ("item_id", "ev_delete", "invalid_argument")
    assert error.error.message.startswith("item_id ") and deleted.item_id == "item_9"


async def _raw(url: str, subprotocols: list[str], headers: dict | None = None):
    import websockets

    ws = await websockets.connect(url.replace("http", "ws") + "/v1/realtime?model=omni", subprotocols=subprotocols,
                                  additional_headers=headers)
    first = json.loads(await asyncio.wait_for(ws.recv(), 60))
    return ws, first


def test_a_browser_key_rides_the_subprotocol(scripted):
    url, _ = scripted

    async def connect():
        ws, first = await _raw(url, ["realtime", f"openai-insecure-api-key.{KEY}"])
        async with ws:
            return ws.subprotocol, first

    subprotocol, first = asyncio.run(connect())
    assert subprotocol == "realtime" and first["type"] == "session.created"


@pytest.mark.parametrize("subprotocols, headers", [
    (["realtime", "openai-insecure-api-key.wrong"], None), (["realtime"], None),
    (None, {"Authorization": "Bearer wrong"})], ids=["wrong-subprotocol-key", "no-key", "wrong-header"])
def test_a_refused_key_is_an_error_then_a_clean_close(scripted, subprotocols, headers):
    import websockets

    url, _ = scripted

    async def refused():
        ws, first = await _raw(url, subprotocols, headers)
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            await asyncio.wait_for(ws.recv(), 60)
        return first, closed.value.rcvd

    first, close = asyncio.run(refused())
    assert first["type"] == "error" and first["error"]["code"] == "unauthenticated", first
    assert close.code == 1008


@pytest.mark.parametrize("query, code", [("?model=nope", "model_not_found"), ("", "invalid_value")],
                         ids=["unknown-model", "no-model"])
def test_a_session_needs_a_served_model(scripted, query, code):
    import websockets

    url, _ = scripted

    async def refused():
        async with websockets.connect(url.replace("http", "ws") + "/v1/realtime" + query,
                                      additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), 60))
            with pytest.raises(websockets.ConnectionClosedError) as closed:
                await asyncio.wait_for(ws.recv(), 60)
            return first, closed.value.rcvd

    first, close = asyncio.run(refused())
    assert (first["type"], first["error"]["param"], first["error"]["code"]) == ("error", "model", code)
    assert close.code == 1008


def test_the_voice_page_and_its_scripts_are_served_without_a_token(scripted):
    import httpx

    url, _ = scripted
    page = httpx.get(f"{url}/", timeout=60)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/static/voice.js">' in page.text
    for name, needle in (("voice.js", "/v1/realtime"), ("capture-worklet.js", "registerProcessor")):
        script = httpx.get(f"{url}/static/{name}", timeout=60)
        assert script.status_code == 200 and "javascript" in script.headers["content-type"] and needle in script.text
    assert httpx.get(f"{url}/static/nothing.js", timeout=60).status_code == 404
