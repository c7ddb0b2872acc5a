"""A consumer returns a per-item route's credits once half its window is owed (its
producer keeps room for the other half), and everything owed once the stream ends or a
credit frees leases; other routes credit every chunk as it is consumed."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.conductor_toys import make_b
from runtime.items import Cancel, NodeDone, NodeOutput, RouteCredit
from runtime.route_in import InRoute
from tests.fixtures.routes import TOKEN, grant, push
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until

pytestmark = pytest.mark.timeout(60)

# one op: ("credit", amount, with a lease) or ("end",) (the producer's end of stream arrived)
OPS = st.lists(st.one_of(st.tuples(st.just("credit"), st.integers(0, 5), st.booleans()), st.just(("end",))),
               max_size=60)


def route(window: int, per_item: bool) -> InRoute:
    return InRoute(grant("r", window=window, per_item=per_item), owner="conductor")


@settings(max_examples=200, deadline=None)
@given(window=st.integers(1, 64), per_item=st.booleans(), ops=OPS)
def test_credits_are_held_below_half_the_window_and_none_is_lost(window, per_item, ops):
    r = route(window, per_item)
    given_total = sent_total = 0
    for op in ops:
        if op == ("end",):
            r.is_ended = True
            continue
        _, amount, with_lease = op
        leases = (7,) if with_lease else ()
        given_total += amount
        sent = r.coalesce(RouteCredit("r", TOKEN, amount, leases))
        if sent is not None:
            assert sent.token == TOKEN and sent.lease_ids == leases and r.owed == 0
            sent_total += sent.amount
        else:  # held: only a per-item route's plain credits, under half its window, before the end
            assert per_item and not leases and not r.is_ended and r.owed < window // 2
        assert sent_total + r.owed == given_total


def credits(stream: RunStream) -> list[RouteCredit]:
    return [e for e in stream.events() if isinstance(e, RouteCredit)]


@pytest.mark.parametrize("item_runs", [True, False])
def test_a_consumer_credits_half_a_window_at_a_time_and_settles_at_the_end(item_runs):
    server = start_in_process(make_b(item_runs))
    try:
        with RunStream(server.address) as conductor, RunStream(server.address) as producer:
            conductor.send(grant("r1", window=8))
            for k in range(5):  # one message each: the chunk runs end in separate engine steps
                producer.send(push("r1", float(k), k))
            assert [c.amount for c in credits(producer)] == [4]  # the fifth is owed
            outputs, done = [], None
            while len(outputs) < 5:  # the fifth chunk run has ended (its output and end are one step's),
                outputs += [e for e in conductor.events() if isinstance(e, NodeOutput)]  # so its credit is owed
            producer.send(push("r1", 5.0, 5, last=True))
            assert [c.amount for c in credits(producer)] == [2]  # the end settles everything owed
            while done is None:
                events = conductor.events()
                outputs += [e for e in events if isinstance(e, NodeOutput)]
                done = next((e for e in events if isinstance(e, NodeDone)), None)
            assert len(outputs) == 6 and done.metadata["edge"]["starmesh.items"] == 6
            conductor.send(Cancel("r1"))
            assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
        server.hosted.step_loop.routed.inb.check_integrity()
    finally:
        server.stop()
