"""A conversation over Sessions.Session keeps its history in the thinker's KV cache: each
turn's text ids, codec codes and audio equal a fresh Generate request given the whole
history as ids (the clips as media), prefilled from scratch; turn N prefills only its new
input (Usage and the thinker's own counters say so); and the session's end leaves no
kept context and no KV block held."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from client.session import ConductorSession
from tests.conductor.session_calls import fresh, pcm16, user_turn, vowels, wav
from tests.conductor.session_mesh import PARAMS
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(240)


def test_three_turns_equal_the_history_sent_whole(session_mesh):
    clip = pcm16(vowels(0.6))
    turns, computed = [], []

    async def respond(conv):
        before = session_mesh.thinker_load()["prompt_tokens_computed_total"]
        turns.append(await conv.respond(raw_outputs=("codes",)))
        computed.append(session_mesh.thinker_load()["prompt_tokens_computed_total"] - before)

    async def converse():
        async with ConductorSession(session_mesh.address) as s:
            async with s.conversation("omni", params=PARAMS) as conv:
                await conv.say("Hello there")
                await respond(conv)
                await conv.append_audio(clip)
                await conv.commit_audio()
                await respond(conv)
                await conv.say("And then?")  # text after a clip: the talker reads the clip's rows from the context
                await respond(conv)
                assert session_mesh.thinker_load()["contexts"] == 1  # one kept context: the conversation

    asyncio.run(converse())
    assert [a.status for a in turns] == ["completed"] * 3
    history, clips = [], []
    inputs = [user_turn("Hello there"), user_turn(audio=True, after=turns[0].token_ids),
              user_turn("And then?", after=turns[1].token_ids)]
    for i, (answer, new) in enumerate(zip(turns, inputs)):
        history += new
        clips += [wav(clip)] if i == 1 else []
        codes = []
        ids, audio = fresh(session_mesh.address, history, clips, PARAMS, codes)
        assert answer.token_ids == ids, f"turn {i + 1}"
        assert len(codes) > 0 and all(np.array_equal(a, b) for a, b in zip(answer.raw["codes"], codes, strict=True))
        assert len(audio) > 0 and np.array_equal(answer.samples(), audio), f"turn {i + 1}"
        u = answer.usage
        assert computed[i] == u.prompt_tokens - u.cached_prompt_tokens  # the thinker computed what Usage says
        if i:  # the context held everything before this turn's input: only that was prefilled
            previous = turns[i - 1].usage
            held = previous.prompt_tokens + len(turns[i - 1].token_ids)  # the kept context's positions
            assert u.prompt_tokens > held and u.cached_prompt_tokens == held - 1  # its last id had no K/V yet
        history += answer.token_ids
    assert wait_until(session_mesh.holds_nothing), session_mesh.thinker_load()
