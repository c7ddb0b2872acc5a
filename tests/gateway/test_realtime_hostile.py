"""Hostile Realtime clients against a real gateway (its conductor a scripted gRPC Sessions
server, tests/gateway/scripted_sessions.py): every bad event is an `error` event naming
the field and the event, and the session lives on; fuzzed JSON never crashes the
gateway (no exception in its ASGI app, no 500) and it serves afterwards; a client that
stops reading is disconnected and its conductor stream cancelled."""
from __future__ import annotations

import base64
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import GatewayConfig
from gateway.realtime_config import RealtimeConfig
from tests.gateway.scripted_sessions import KEY, scripted_gateway

pytestmark = pytest.mark.timeout(180)
LIMITS = RealtimeConfig(max_event_bytes=64 << 10, max_audio_bytes=16 << 10, max_send_queue_bytes=256 << 10)


@pytest.fixture(scope="module")
def scripted():
    with scripted_gateway(GatewayConfig(port=0, realtime=LIMITS)) as (url, record):
        yield url, record


@pytest.fixture
def ws(scripted):
    from websockets.sync.client import connect

    url, _ = scripted
    with connect(url.replace("http", "ws") + "/v1/realtime?model=omni", additional_headers={
            "Authorization": f"Bearer {KEY}"}, open_timeout=60) as conn:
        assert json.loads(conn.recv(timeout=60))["type"] == "session.created"
        yield conn


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _until_probe(conn, n: int) -> list[dict]:
    """Sends a harmless event and returns every event up to its answer: what the events
    sent before it made (the gateway and the conductor answer in order)."""
    conn.send(json.dumps({"type": "conversation.item.delete", "item_id": f"probe_{n}"}))
    seen = []
    while True:
        event = json.loads(conn.recv(timeout=60))
        if event["type"] == "conversation.item.deleted" and event["item_id"] == f"probe_{n}":
            return seen
        seen.append(event)


SESSION = {"type": "session.update", "session": {"type": "realtime"}}
BAD = [  # (the event's text, the param its error names)
    ("not json", "event"), ("[1, 2]", "event"), ('{"type": 5}', "type"), ('{"type": "nope"}', "type"),
    ('{"type": "conversation.item.retrieve", "item_id": "x"}', "type"),
    ('{"type": "input_audio_buffer.append", "audio": "!!!"}', "audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": _b64(b"abc")}), "audio"),
    ('{"type": "input_audio_buffer.append", "audio": 5}', "audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": _b64(bytes(LIMITS.max_audio_bytes + 2))}), "audio"),
    ('{"type": "session.update", "session": "x"}', "session"),
    (json.dumps({**SESSION, "session": {"audio": {"input": {"format": {"type": "audio/pcmu"}}}}}),
     "session.audio.input.format.type"),
    (json.dumps({**SESSION, "session": {"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}}}),
     "session.audio.output.format.rate"),
    (json.dumps({**SESSION, "session": {"output_modalities": ["video"]}}), "session.output_modalities[0]"),
    (json.dumps({**SESSION, "session": {"output_modalities": ["text", "audio"]}}), "session.output_modalities"),
    (json.dumps({**SESSION, "session": {"audio": {"output": {"voice": "nobody"}}}}), "session.audio.output.voice"),
    (json.dumps({**SESSION, "session": {"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}}),
     "session.audio.input.turn_detection.type"),
    (json.dumps({**SESSION, "session": {"audio": {"input": {"turn_detection": {"threshold": "high"}}}}}),
     "session.audio.input.turn_detection.threshold"),
    (json.dumps({**SESSION, "session": {"max_output_tokens": 0}}), "session.max_output_tokens"),
    (json.dumps({**SESSION, "session": {"tools": [{"type": "function"}]}}), "session.tools"),
    (json.dumps({**SESSION, "session": {"bogus": 1}}), "bogus"),
    (json.dumps({**SESSION, "session": {"max_frames": -1}}), "max_frames"),
    (json.dumps({**SESSION, "session": {"type": "transcription"}}), "session.type"),
    ('{"type": "conversation.item.create", "item": {"role": "robot", "content": [{"type": "input_text", "text": "a"}]}}',
     "item.role"),
    ('{"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_image"}]}}',
     "item.content[0].type"),
    ('{"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_text", '
     '"text": "\\ud800"}]}}', "item.content[0].text"),
    (json.dumps({"type": "conversation.item.create", "item": {"role": "user", "content": [
        {"type": "input_audio", "audio": _b64(b"odd")}]}}), "item.content[0].audio"),
    ('{"type": "conversation.item.create", "item": {"role": "user", "content": []}}', "item.content"),
    ('{"type": "conversation.item.truncate", "item_id": "a", "audio_end_ms": -1}', "audio_end_ms"),
    ('{"type": "conversation.item.truncate", "item_id": "a", "audio_end_ms": "10"}', "audio_end_ms"),
    ('{"type": "conversation.item.delete"}', "item_id"),
    ('{"type": "response.create", "response": {"output_modalities": ["audio", "text"]}}', "response.output_modalities"),
    ('{"type": "response.create", "response": {"conversation": "none"}}', "response.conversation"),
    ('{"type": "response.cancel", "response_id": 7}', "response_id"),
    ('{"type": "response.cancel", "event_id": 7}', "event_id"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "A" * LIMITS.max_event_bytes}), "event"),
]


@pytest.mark.parametrize("text, param", BAD, ids=[f"{i}-{p}" for i, (_, p) in enumerate(BAD)])
def test_a_bad_event_names_its_field_and_the_session_lives_on(ws, text, param):
    event_id = "evt_bad"
    if text.startswith("{") and '"event_id"' not in text:
        text = '{"event_id": "evt_bad", ' + text[1:]
    ws.send(text)
    seen = _until_probe(ws, 0)
    assert [e["type"] for e in seen] == ["error"], seen
    error = seen[0]["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error
    if text.startswith("{") and param != "event_id":
        assert error["event_id"] == event_id, error


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                max_size=4), max_leaves=12)
KINDS = ["session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
         "conversation.item.create", "conversation.item.truncate", "conversation.item.delete", "response.create",
         "response.cancel", "bogus"]
FIELDS = ["session", "audio", "item", "item_id", "audio_end_ms", "content_index", "response", "response_id",
          "previous_item_id", "event_id"]
EVENTS = st.builds(lambda kind, fields: {**fields, "type": kind}, st.sampled_from(KINDS) | st.text(max_size=10),
                   st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4))
SERVER_EVENTS = {"error", "session.updated", "input_audio_buffer.committed", "input_audio_buffer.cleared",
                 "conversation.item.added", "conversation.item.deleted"}


def test_fuzzed_events_get_errors_and_never_crash_the_gateway(ws, scripted, caplog):
    import httpx

    caplog.set_level(logging.ERROR)
    count = iter(range(1, 10**6))

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(event=EVENTS | JSON.map(json.dumps))
    def fuzz(event):
        ws.send(event if isinstance(event, str) else json.dumps(event))
        for seen in _until_probe(ws, next(count)):
            assert seen["type"] in SERVER_EVENTS or seen["type"].startswith("response."), seen
            if seen["type"] == "error":
                assert seen["error"]["message"] and seen["error"]["type"], seen

    fuzz()
    url, _ = scripted
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=60).status_code == 200
    crashes = [r for r in caplog.records if r.name.startswith("uvicorn") or "Traceback" in r.getMessage()]
    assert not crashes, [r.getMessage() for r in crashes]


def test_a_client_that_stops_reading_is_disconnected_and_its_session_cancelled(scripted):
    import httpx
    from websockets.sync.client import connect

    url, record = scripted
    before = record.cancelled
    # max_queue: the client stops reading the socket once 4 frames wait unread (and sends
    # no pings, which would end the connection from its side)
    with connect(url.replace("http", "ws") + "/v1/realtime?model=omni", max_queue=4, open_timeout=60,
                 ping_interval=None, close_timeout=1,
                 additional_headers={"Authorization": f"Bearer {KEY}"}) as conn:
        conn.send(json.dumps({"type": "response.create", "response": {"instructions": "forever"}}))
        assert record.wait_cancelled(before + 1), "the stalled client's session stream was not cancelled"
    metrics = httpx.get(f"{url}/metrics", timeout=60).text
    assert 'starmesh_gateway_realtime_closes_total{outcome="client_not_reading"} 1.0' in metrics
