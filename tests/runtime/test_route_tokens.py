"""A replica accepts routed pushes only for routes a conductor granted on its own
stream: the token binds the request, node, iteration and port, and the first stream
that pushes with it; outputs go to the granting stream, credits to the pusher."""
import queue

import pytest

from bench.conductor_toys import make_b
from graph.chunking import FixedChunk
from runtime.items import Cancel, NodeDone, NodeError, NodeOutput, OpenNode, RouteCredit
from tests.fixtures.routes import TOKEN, grant, push
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from transport.codec import view

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module", params=[True, False], ids=["item_runs", "chunk_runs"])
def server(request):
    s = start_in_process(make_b(item_runs=request.param))
    yield s
    s.stop()


def kinds(events) -> dict:
    out: dict = {}
    for ev in events:
        out.setdefault(type(ev), []).append(ev)
    return out


def test_a_granted_route_opens_chunk_runs_and_reports_to_the_granter(server):
    with RunStream(server.address) as conductor, RunStream(server.address) as producer:
        conductor.send(grant("r1"))
        producer.send(push("r1", 3.0, 0), push("r1", 4.0, 1, last=True))
        outputs, marker = [], None
        while marker is None:
            got = kinds(conductor.events())
            outputs += got.get(NodeOutput, [])
            marker = next(iter(got.get(NodeDone, [])), None)
        values = [float(view(o.tensors["y"].location.data, o.tensors["y"].dtype, o.tensors["y"].shape)[0])
                  for o in outputs]
        assert values == [3.0, 4.0] and [o.iteration for o in outputs] == [(0,), (1,)]
        assert marker.iteration == () and marker.metadata["edge"]["starmesh.items"] == 2
        credits = [e for e in producer.events() if isinstance(e, RouteCredit)]
        assert credits and all(c.token == TOKEN for c in credits)
        conductor.send(Cancel("r1"))
        assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
    server.hosted.step_loop.routed.inb.check_integrity()  # read between messages: a momentary view


def test_a_push_that_does_not_match_its_grant_is_refused(server):
    with RunStream(server.address) as conductor, RunStream(server.address) as producer, \
            RunStream(server.address) as stranger:
        conductor.send(grant("r2"))
        stranger.send(push("r2", 1.0, 0, node="check"))  # another node of the same request
        [refused] = stranger.events()
        assert isinstance(refused, NodeError) and refused.status == "PERMISSION_DENIED"
        producer.send(push("r2", 1.0, 0))
        assert isinstance(conductor.events()[0], NodeOutput)
        stranger.send(push("r2", 2.0, 1))  # the right route, but the token is the producer's
        [refused] = stranger.events()
        assert refused.status == "PERMISSION_DENIED" and "another stream" in refused.message
        conductor.send(Cancel("r2"))


def test_a_token_nobody_granted_touches_nothing(server):
    before = describe(server.address).num_open_requests
    with RunStream(server.address) as stranger:
        stranger.send(push("r3", 1.0, 0, token="0" * 32))
        with pytest.raises(queue.Empty):  # no answer at all: it waits, bounded, for a grant that never comes
            stranger.events(timeout_s=0.5)
    assert describe(server.address).num_open_requests == before


def test_a_push_before_its_grant_waits_for_it(server):
    with RunStream(server.address) as conductor, RunStream(server.address) as producer:
        producer.send(push("r4", 5.0, 0, last=True, token="a" * 32))
        conductor.send(grant("r4", token="a" * 32))
        got = kinds(conductor.events())
        while NodeDone not in got:
            for kind, evs in kinds(conductor.events()).items():
                got.setdefault(kind, []).extend(evs)
        assert len(got[NodeOutput]) == 1
        conductor.send(Cancel("r4"))


def test_route_policy_round_trips_on_the_wire():
    from runtime.item_proto import item_from_proto, items_to_proto
    from runtime.items import EdgeRoute

    route = EdgeRoute("x", "mid", "x", FixedChunk(1), (2,), 8, "127.0.0.1:1", "h", TOKEN, "src.x -> mid.x")
    item = OpenNode("r", "src", "stream", routes=(route,), quiet_ports=("x",))
    back = item_from_proto(items_to_proto([item]).items[0], "items[0]")
    assert back.routes == (route,) and back.quiet_ports == ("x",)
    accept = grant("r")
    assert item_from_proto(items_to_proto([accept]).items[0], "items[0]") == accept


def test_a_long_routed_stream_leaves_no_per_chunk_run_state_behind(server):
    """One chunk run per item: the replica keeps nothing per ended chunk run (a stream of
    thousands of items would otherwise grow the request's state with every one)."""
    n = 40
    with RunStream(server.address) as conductor, RunStream(server.address) as producer:
        conductor.send(grant("r-long", "e" * 32))
        producer.send(*(push("r-long", float(k), k, last=k == n - 1, token="e" * 32) for k in range(n)))
        outputs, done = 0, False
        while not done:
            got = kinds(conductor.events())
            outputs += len(got.get(NodeOutput, []))
            done = bool(got.get(NodeDone))
        assert outputs == n
        state = server.hosted.step_loop._table.requests["r-long"]  # read between messages: a momentary view
        assert len(state.ended) < n // 4, len(state.ended)
        conductor.send(Cancel("r-long"))
        assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
