"""A session's pieces without a mesh: its turns rendered with the tiny template equal the
template applied to the whole conversation, answers keep their generated ids, truncation
maps played audio to text ids (80 ms a frame), the token bound drops the oldest turn, and
silero-vad marks speech-like audio (with its position) and not silence."""
from __future__ import annotations

import numpy as np
import pytest

from conductor.session_conversation import Conversation, Segment
from core.session_events import Clip, Item, TurnDetection
from conductor.session_framing import AUDIO, ChatFraming, Message
from conductor.session_vad import SpeechDetector
from core.errors import InvalidArgument, NotFound
from engine.models.qwen3_omni.tiny import OMNI_TEMPLATE
from tests.conductor.session_calls import pcm16, silence, user_turn, vowels


@pytest.fixture(scope="module")
def framing(tokenizer):
    return ChatFraming(tokenizer)


def _user(conv: Conversation, item_id: str, *parts) -> None:
    conv.add(Segment(Item(item_id, "user", parts)))


def test_a_turn_renders_as_the_template_renders_the_conversation(framing, tokenizer):
    answer = [104, 105, 257]  # ends on <|im_end|>: only "\n" closes it
    assert framing.first([Message("user", ("Hi",))]) + framing.opening == user_turn("Hi")
    assert framing.closing(answer) + framing.message(Message("user", (AUDIO,))) + framing.opening == \
        user_turn(audio=True, after=answer)
    assert framing.closing([104]) == [257, 10]
    whole = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "hi"},
                                           {"role": "user", "content": "Go"}], add_generation_prompt=True,
                                          return_dict=False)
    hi = tokenizer.encode("hi", add_special_tokens=False)
    conv = Conversation(max_tokens=1000)
    _user(conv, "u1", "Hi")
    first = conv.turn(framing, "", 8)
    conv.add(seg := Segment(Item("a1", "assistant"), answer_ids=list(hi)))
    conv.answered(first, seg, len(first.ids), "ctx_" + "0" * 32, "")
    _user(conv, "u2", "Go")
    second = conv.turn(framing, "", 8)
    assert second.context_id and first.ids + hi + second.ids == list(whole)
    assert OMNI_TEMPLATE == tokenizer.chat_template


def test_truncation_keeps_the_ids_its_frames_spoke(framing):
    conv = Conversation(max_tokens=1000)
    _user(conv, "u1", "Hi")
    sent = conv.turn(framing, "", 8)
    conv.add(seg := Segment(Item("a1", "assistant"), answer_ids=[1, 2, 3, 4, 5]))
    conv.answered(sent, seg, 20, "ctx_" + "0" * 32, "")
    assert conv.truncate("a1", 170) == (3, 23)  # ceil(170 / 80) = 3 frames: ids 0..2; the context cut at 20 + 3
    assert seg.answer_ids == [1, 2, 3] and conv.context_tokens == 23
    with pytest.raises(NotFound, match="truncate_item.item_id"):
        conv.truncate("nope", 80)
    with pytest.raises(InvalidArgument, match="not a model answer"):
        conv.truncate("u1", 80)


def test_the_token_bound_drops_the_oldest_turn(framing):
    conv = Conversation(max_tokens=60)
    for n in range(3):
        _user(conv, f"u{n}", "x" * 15)
        conv.add(Segment(Item(f"a{n}", "assistant"), answer_ids=[7] * 5))
    _user(conv, "u3", "x" * 15)
    sent = conv.turn(framing, "", 5)
    assert sent.context_id == "" and sent.dropped == ("u0", "a0", "u1", "a1")
    assert [s.item.id for s in conv.segments] == ["u2", "a2", "u3"]
    conv.segments.append(Segment(Item("u4", "user", ("x" * 200,))))
    with pytest.raises(InvalidArgument, match="context tokens"):
        conv.turn(framing, "", 5)


def test_a_clip_travels_beside_its_placeholder(framing):
    conv = Conversation(max_tokens=1000)
    clip = Clip(silence(0.1), 24000)
    _user(conv, "u1", clip, "What?")
    sent = conv.turn(framing, "Be brief.", 8)
    assert sent.clips == [clip] and sent.ids.count(265) == 1  # one <|audio_pad|>, widened by the media walk


def test_silero_marks_speech_and_not_silence():
    vad = SpeechDetector(TurnDetection(silence_duration_ms=300), input_rate=24000)
    marks = vad.feed(silence(1.0) + pcm16(vowels(1.0)) + silence(1.0))
    assert [m.started for m in marks] == [True, False]
    assert 900 <= marks[0].audio_ms <= 1200 and 1900 <= marks[1].audio_ms <= 2300
    assert SpeechDetector(TurnDetection(), 16000, vad.model).feed(silence(2.0, 16000)) == []
    with pytest.raises(InvalidArgument, match="threshold"):
        SpeechDetector(TurnDetection(threshold=1.5), 24000, vad.model)
