"""Barge-in and truncation over Sessions.Session: a truncated answer is forgotten past the
text its played frames covered (the thinker's context is cut back to match), a cancelled
response keeps only the ids that were sent, and with server VAD speech that starts during
a response cancels it; each time the next turn equals a conversation whose history holds
only what was kept."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from client.session import ConductorSession
from protos.starmesh.v1 import session_pb2 as pb
from tests.conductor.session_calls import fresh, pcm16, silence, user_turn, vowels
from tests.conductor.session_mesh import PARAMS
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(240)
LONG = {"max_new_tokens": 6, "max_frames": 2000, "min_frames": 2000}  # 160 s of audio: still speaking when cut


def _kind(e) -> str:
    return e.WhichOneof("kind")


def _equal_fresh(mesh, answer, history: list[int]) -> None:
    ids, audio = fresh(mesh.address, history, [], PARAMS)
    assert answer.status == "completed" and answer.token_ids == ids
    assert np.array_equal(answer.samples(), audio)


def test_a_truncated_answer_is_forgotten_past_what_was_played(session_mesh):
    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                await conv.say("Hello there")
                first = await conv.respond()
                await conv.truncate(first.item_id, audio_end_ms=160)  # 2 frames: the first 2 text ids
                await conv.say("Go on")
                return first, await conv.respond()

    first, second = asyncio.run(converse())
    kept = first.token_ids[:2]
    assert len(first.token_ids) > 2
    _equal_fresh(session_mesh, second, user_turn("Hello there") + kept + user_turn("Go on", after=kept))
    # the cut context was continued, not rebuilt: the first turn's prompt came from it
    assert second.usage.cached_prompt_tokens >= first.usage.prompt_tokens
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()


def test_a_cancelled_response_keeps_the_ids_that_were_sent(session_mesh):
    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                await conv.say("Sing")
                long = await conv.start_response(params=LONG)
                await conv.finish(long, until=lambda e: e.output.WhichOneof("part") == "audio")
                await conv.cancel(long.response_id)
                long = await conv.finish(long)
                await conv.say("Stop")
                return long, await conv.respond()

    cut, after = asyncio.run(converse())
    assert (cut.status, cut.reason) == ("cancelled", "client_cancelled")
    assert cut.token_ids  # text travels with its audio: some ids were sent
    _equal_fresh(session_mesh, after, user_turn("Sing") + cut.token_ids + user_turn("Stop", after=cut.token_ids))
    # its thinker had kept the whole answer before the cancel came: released with the session
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()


def test_speech_during_a_response_cancels_it(session_mesh):
    """Server VAD with interrupt_response: the user speaking over the answer cancels it
    (turn_detected); the speech becomes a user item when it stops, and is answered."""
    vad = pb.TurnDetection(silence_duration_ms=300, interrupt_response=True, create_response=True)

    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS, turn_detection=vad) as conv:
                await conv.say("Sing")
                long = await conv.start_response(params=LONG)
                await conv.finish(long, until=lambda e: e.output.WhichOneof("part") == "audio")
                await conv.append_audio(silence(0.5) + pcm16(vowels(0.8)))
                long = await conv.finish(long)
                await conv.append_audio(silence(0.6))
                created = await conv.next(lambda e: _kind(e) == "response_created")
                from client.conversation import Answer

                answer = await conv.finish(Answer(created.response_created.response_id,
                                                  created.response_created.item_id))
                marks = conv.take(lambda e: _kind(e) in ("speech_started", "speech_stopped"))
                return long, answer, marks

    cut, answer, marks = asyncio.run(converse())
    assert (cut.status, cut.reason) == ("cancelled", "turn_detected")
    assert [_kind(m) for m in marks] == ["speech_started", "speech_stopped"]
    started, stopped = marks[0].speech_started.audio_ms, marks[1].speech_stopped.audio_ms
    assert 400 <= started <= 700 and 1100 <= stopped <= 1500  # the speech is 500..1300 ms of the appended audio
    assert answer.status == "completed" and answer.token_ids
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()


def test_deleted_items_are_forgotten(session_mesh):
    """Deleting items the context holds makes the next turn send the conversation whole
    (the remaining answers as their ids); an audio part of a created item travels as a clip."""
    from protos.starmesh.v1 import conductor_pb2 as cpb
    from tests.conductor.session_calls import wav

    clip = pcm16(vowels(0.4, seed=1))

    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                first = await conv.say("A")
                gone = await conv.respond()
                await conv.say("B")
                kept = await conv.respond()
                for item_id in (first, gone.item_id):
                    event_id = await conv.send(delete_item=item_id)
                    await conv.next(lambda e: _kind(e) == "item_deleted", event_id)
                event_id = await conv.send(create_item=pb.SessionItem(role="user", content=[
                    cpb.ContentPart(audio=cpb.MediaPart(data=clip))]))
                await conv.next(lambda e: _kind(e) == "item_done", event_id)
                return kept, await conv.respond()

    kept, answer = asyncio.run(converse())
    history = user_turn("B") + kept.token_ids + user_turn(audio=True, after=kept.token_ids)
    ids, audio = fresh(session_mesh.address, history, [wav(clip)], PARAMS)
    assert answer.status == "completed" and answer.token_ids == ids and np.array_equal(answer.samples(), audio)
    assert answer.usage.prompt_tokens > len(history)  # the clip's placeholder widened to its rows
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()
