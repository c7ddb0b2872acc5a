"""TextHold: a voice stream's text deltas wait for its next other event, or until
max_held of them wait; nothing is lost, reordered or held past the end."""
import pytest
from hypothesis import given, strategies as st

from conductor.text_hold import TextHold, is_text
from protos.starmesh.v1 import conductor_pb2 as pb

KINDS = {"t": lambda k: pb.GenerateEvent(text=pb.TextDelta(token_ids=[k])),
         "a": lambda k: pb.GenerateEvent(audio=pb.AudioChunk(sequence_number=k)),
         "u": lambda k: pb.GenerateEvent(usage=pb.Usage(completion_tokens=k))}

batches = st.lists(st.lists(st.sampled_from("ttta"), max_size=4), max_size=30)


def _events(shape: list[list[str]]) -> list[list[pb.GenerateEvent]]:
    n = iter(range(10**6))
    return [[KINDS[kind](next(n)) for kind in batch] for batch in shape]


@given(shape=batches, max_held=st.integers(0, 6))
def test_every_event_goes_once_in_order_and_text_waits_only_for_a_bounded_time(shape, max_held):
    hold = TextHold(max_held)
    sent = []
    for batch in _events(shape):
        out = hold.batch(batch)
        if out:
            if max_held:  # something else carries it, or enough text waited
                assert any(not is_text(e) for e in out) or len(out) >= max_held
            else:
                assert out == batch  # holding off: batches as they come
            sent.append(out)
        assert len(hold.held) < max(max_held, 1)
    sent.append(hold.rest() + [KINDS["u"](10**7)])
    flat_in = [e for b in _events(shape) for e in b] + [KINDS["u"](10**7)]
    assert [e for b in sent for e in b] == flat_in
    assert not hold.held


def test_text_goes_at_the_front_of_the_next_audio_batch():
    hold = TextHold(8)
    t1, t2, a = KINDS["t"](1), KINDS["t"](2), KINDS["a"](0)
    assert hold.batch([t1]) == [] and hold.batch([t2]) == []
    assert hold.batch([a]) == [t1, t2, a]
    assert hold.batch([KINDS["t"](3)]) == [] and hold.rest() == [KINDS["t"](3)]


def test_a_negative_bound_is_refused():
    with pytest.raises(ValueError, match="max_held"):
        TextHold(-1)
