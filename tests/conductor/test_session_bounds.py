"""What sessions may hold, and bad inputs: an error event names the field and the input's
event_id and the session lives on; past max_sessions a stream is RESOURCE_EXHAUSTED; the
context-token bound drops the oldest turns and prefills what remains (the answer equals
that shorter history sent whole); appended audio is bounded; closing, disconnecting and
expiring free every block; the open sessions are a Prometheus gauge."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from client.call_failed import CallFailed
from client.conversation import SessionError
from client.session import ConductorSession
from conductor.session_limits import SessionLimits
from protos.starmesh.v1 import session_pb2 as pb
from tests.conductor.session_calls import fresh, silence, user_turn
from tests.conductor.session_mesh import LIMITS, PARAMS, another_conductor
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(240)


def test_bad_inputs_are_error_events_and_the_session_lives_on(session_mesh):
    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                refused = []
                for kind, value in (("append_audio", b"\x01\x02\x03"),
                                    ("truncate_item", pb.ItemTruncate(item_id="item_nope", audio_end_ms=80)),
                                    ("delete_item", "item_nope"), ("commit_audio", True),
                                    ("configure", pb.SessionConfig(model="other")),
                                    ("configure", pb.SessionConfig(voice="nobody")),
                                    ("create_item", pb.SessionItem(role="robot"))):
                    event_id = await conv.send(**{kind: value})
                    with pytest.raises(SessionError) as e:
                        await conv.next(lambda ev: False, event_id)
                    refused.append((e.value.code, e.value.param))
                await conv.say("Still here?")
                answer = await conv.respond()
                await conv.send(configure=pb.SessionConfig(voice="chelsie"))
                await conv.say("Just text")
                return refused, answer, await conv.respond(output_modalities=("text",))

    refused, answer, text = asyncio.run(converse())
    assert refused == [("INVALID_ARGUMENT", "append_audio"), ("NOT_FOUND", "truncate_item.item_id"),
                       ("NOT_FOUND", "delete_item"), ("INVALID_ARGUMENT", "commit_audio"),
                       ("INVALID_ARGUMENT", "configure.model"), ("INVALID_ARGUMENT", "configure.voice"),
                       ("INVALID_ARGUMENT", "create_item.role")]
    assert answer.status == "completed" and answer.token_ids
    assert text.status == "completed" and text.token_ids and not text.audio  # TEXT output: text deltas alone
    assert all(e.output.WhichOneof("part") == "text" for e in text.events if e.WhichOneof("kind") == "output")
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()


def test_a_session_needs_the_conductors_api_key(session_mesh):
    async def converse(address: str, key: str):
        from client.connection import Connection

        async with ConductorSession(Connection(address, api_key=key)) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                await conv.say("Hi")
                return await conv.respond()

    with another_conductor(session_mesh, api_key="s3cret") as server:
        with pytest.raises(CallFailed) as e:
            asyncio.run(converse(server.address, "wrong"))
        assert e.value.code == "UNAUTHENTICATED"
        assert asyncio.run(converse(server.address, "s3cret")).status == "completed"
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()


def test_configure_must_come_first(session_mesh):
    async def first_input():
        from client.conversation import Conversation

        from protos.starmesh.v1 import session_pb2_grpc

        async with ConductorSession(session_mesh.address) as s:
            conv = Conversation(s.channel, (), None)
            conv._call = session_pb2_grpc.SessionsStub(s.channel).Session()
            event_id = await conv.send(commit_audio=True)
            try:
                await conv.next(lambda ev: False, event_id)
            finally:
                conv._call.cancel()

    with pytest.raises(SessionError) as e:
        asyncio.run(first_input())
    assert (e.value.code, e.value.param) == ("INVALID_ARGUMENT", "configure")


def test_sessions_past_the_limit_are_refused_and_counted(session_mesh):
    from prometheus_client import CollectorRegistry, generate_latest

    from conductor.metrics import ConductorMetrics

    metrics = ConductorMetrics(CollectorRegistry())
    metrics.watch_sessions(session_mesh.service.sessions.open, ["omni"])

    async def three():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni"), s.conversation("omni"):
                exposed = generate_latest(metrics.registry).decode()
                with pytest.raises(CallFailed) as e:
                    async with s.conversation("omni"):
                        pass
                return exposed, e.value

    exposed, refusal = asyncio.run(three())
    assert LIMITS.max_sessions == 2 and 'starmesh_sessions_open{model="omni"} 2.0' in exposed
    assert refusal.code == "RESOURCE_EXHAUSTED" and "max_sessions" in refusal.message, refusal
    assert wait_until(session_mesh.holds_nothing)


def test_past_the_token_bound_the_oldest_turn_is_dropped(session_mesh):
    texts = ["a" * 300, "b" * 300, "c" * 300]  # ~320 tokens a turn: the third passes 900 with the first

    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                answers = []
                for text in texts:
                    await conv.say(text)
                    answers.append(await conv.respond())
                return answers

    answers = asyncio.run(converse())
    second, third = answers[1], answers[2]
    history = user_turn(texts[1]) + second.token_ids + user_turn(texts[2], after=second.token_ids)
    ids, audio = fresh(session_mesh.address, history, [], PARAMS)
    assert third.status == "completed" and third.token_ids == ids and np.array_equal(third.samples(), audio)
    assert third.usage.prompt_tokens == len(history) <= LIMITS.max_context_tokens
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()


def test_appended_audio_is_bounded(session_mesh):
    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                event_id = await conv.append_audio(silence(LIMITS.max_audio_s + 1))
                with pytest.raises(SessionError) as e:
                    await conv.next(lambda ev: False, event_id)
                await conv.append_audio(silence(0.5))  # what fits is taken
                await conv.commit_audio()
                return e.value

    refusal = asyncio.run(converse())
    assert (refusal.code, refusal.param) == ("RESOURCE_EXHAUSTED", "append_audio")


class Vanished(Exception):
    """The client goes away mid-response."""


def test_disconnect_and_expiry_free_everything(session_mesh):
    """A client that vanishes mid-response, and a session idle past its timeout (on a
    second conductor over the same services): each ends, and nothing stays held."""
    async def vanish():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                await conv.say("Hello")
                await conv.respond()
                await conv.say("Again")
                answer = await conv.start_response(params={"max_frames": 2000, "min_frames": 2000})
                await conv.finish(answer, until=lambda e: e.output.WhichOneof("part") == "audio")
                raise Vanished  # leaves the block: the call is cancelled, not closed

    with pytest.raises(Vanished):
        asyncio.run(vanish())
    assert wait_until(session_mesh.holds_nothing, 30), session_mesh.thinker_load()

    with another_conductor(session_mesh, sessions=SessionLimits(idle_timeout_s=0.5)) as server:
        async def idle():
            async with ConductorSession(server.address) as s:
                async with s.conversation("omni", params=PARAMS) as conv:
                    await conv.say("Hello")
                    await conv.respond()
                    await conv.next(lambda ev: False, timeout_s=60)  # until the session ends

        with pytest.raises(CallFailed) as e:
            asyncio.run(idle())
        assert e.value.code == "DEADLINE_EXCEEDED" and "idle_timeout_s" in e.value.message
        assert wait_until(lambda: not server.hosted.sessions.open and session_mesh.holds_nothing(), 30)


def test_a_client_that_stops_reading_holds_nothing(session_mesh):
    """Past max_unread_events unread, the session's response is cancelled and its context
    released while the client sleeps; when it reads again, the stream says why it ended."""
    def gave_up(server) -> bool:
        sessions = list(server.hosted.sessions.open.values())
        return bool(sessions) and sessions[0].response is not None and sessions[0].response.is_done

    async def sleeper(server):
        async with ConductorSession(server.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                await conv.say("Sing")
                answer = await conv.start_response(params={"max_frames": 2000, "min_frames": 2000})
                assert await asyncio.to_thread(wait_until, lambda: gave_up(server), 60)  # reading nothing meanwhile
                assert await asyncio.to_thread(wait_until, lambda: session_mesh.thinker_load()["contexts"] == 0, 30)
                await conv.finish(answer, timeout_s=60)

    with another_conductor(session_mesh, sessions=SessionLimits(max_unread_events=8)) as server:
        with pytest.raises(CallFailed) as e:
            asyncio.run(sleeper(server))
        assert e.value.code == "RESOURCE_EXHAUSTED" and "max_unread_events" in e.value.message
        assert wait_until(lambda: not server.hosted.sessions.open and session_mesh.holds_nothing(), 30)
