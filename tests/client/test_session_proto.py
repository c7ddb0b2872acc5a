"""A session's plain data crosses the gRPC edges unchanged: what a client writes
(client.session_proto) is what the conductor reads (conductor.session_proto), and what
the conductor sends is what a client reads, field by field; an echoed item's audio part
comes back as a Clip with no audio (the client sent its bytes)."""
from __future__ import annotations

import numpy as np
import pytest

from client.session_proto import event_from_proto, input_to_proto
from conductor.session_proto import event_to_proto, input_from_proto
from core.session_events import (AudioOut, Cleared, Clip, Committed, Deleted, Failure, Input, Item, ItemEvent, RawOut,
                                 ResponseCreated, ResponseDone, ResponseRequest, SessionState, Settings, Speech, State,
                                 TextOut, Truncate, Truncated, TurnDetection, Usage)

RATE = 24000
PCM = (np.arange(480) % 50 * 300).astype("<i2").tobytes()
DETECTION = TurnDetection(0.25, 200, 700, create_response=True, interrupt_response=False)
INPUTS = [
    Input("e1", "configure", Settings("omni", "be brief", ("audio",), "ethan", DETECTION, False, RATE,
                                      {"max_frames": 10})),
    Input("e2", "configure", Settings(no_turn_detection=True)),
    Input("e3", "append_audio", PCM),
    Input("e4", "commit_audio", True),
    Input("e5", "clear_audio", True),
    Input("e6", "create_item", Item("item_a", "user", ("Hello", Clip(PCM, RATE)), previous_item_id="item_0")),
    Input("e7", "create_item", Item("", "assistant", ("Hi there",))),
    Input("e8", "truncate_item", Truncate("item_b", 0, 880)),
    Input("e9", "delete_item", "item_c"),
    Input("e10", "create_response", ResponseRequest(("text",), "answer in French", {"max_new_tokens": 8},
                                                    ("codes",))),
    Input("e11", "create_response", ResponseRequest()),
    Input("e12", "cancel_response", "resp_1"),
]


@pytest.mark.parametrize("inp", INPUTS, ids=[i.event_id + "-" + i.kind for i in INPUTS])
def test_what_a_client_writes_is_what_the_conductor_reads(inp):
    assert input_from_proto(input_to_proto(inp), RATE) == inp


def test_an_unknown_input_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="'shout'"):
        input_to_proto(Input("e", "shout", "hey"))


def _events():
    from protos.starmesh.v1 import tensor_pb2

    usage = Usage(12, 5, 3, 0.5, 80.0, "ctx_1")
    answer = Item("item_r", "assistant", ("Hi there",), "completed", "item_a")
    raw = tensor_pb2.NamedTensor(name="codes")
    state = State("omni", "be brief", ("audio",), "ethan", DETECTION, RATE, {"max_frames": 10})
    return [SessionState("sess_1", state, True), SessionState("sess_1", State("omni", turn_detection=None), False),
            Speech(True, 480, "item_s"), Speech(False, 1300, "item_s"), Committed("item_s", "item_r"), Cleared(),
            ItemEvent(Item("item_t", "user", ("Hello",), "completed", "item_s"), False), ItemEvent(answer, True),
            Truncated(Truncate("item_r", 0, 160)), Deleted("item_t"), ResponseCreated("resp_1", "item_r"),
            TextOut("resp_1", "item_r", (7, 8), "Hi", transcript=True), TextOut("resp_1", "item_r", (9,), " x", False),
            AudioOut("resp_1", "item_r", np.ones(4, "<f4").tobytes(), RATE, 2, 4), RawOut("resp_1", "item_r", raw),
            ResponseDone("resp_1", "cancelled", usage, answer, "turn_detected"),
            Failure("INVALID_ARGUMENT", "delete_item 'x' is no item", "delete_item", "e9")]


def test_what_the_conductor_sends_is_what_a_client_reads():
    for event in _events():
        assert event_from_proto(event_to_proto("ev_1", event)) == event, event


def test_an_echoed_audio_part_carries_no_audio():
    item = Item("item_u", "user", ("Hello", Clip(PCM, RATE)), "completed")
    read = event_from_proto(event_to_proto("ev_1", ItemEvent(item, True)))
    assert read.item.parts == ("Hello", Clip(b"", 0))


def test_a_message_with_nothing_set_reads_as_nothing_or_defaults():
    from protos.starmesh.v1 import session_pb2 as pb

    assert event_from_proto(pb.SessionEvent()) is None
    done = event_from_proto(pb.SessionEvent(response_done=pb.ResponseDone(response_id="r", status="cancelled")))
    assert done.usage is None and done.item == Item("", "", (), "", "")
    state = event_from_proto(pb.SessionEvent(session=pb.SessionState(config=pb.SessionConfig(
        turn_detection=pb.TurnDetection(create_response=True)))))
    assert state.state.turn_detection == TurnDetection(create_response=True)   # 0 fields: the defaults
