"""Request ids on a replica are scoped to the stream that opened them: a stream that
names an id another stream opened first gets a request of its own, so nobody can take,
block or touch another stream's request by squatting its id. Outputs, errors,
heartbeats and refusals come back under the id each stream named; a Release or Cancel
acts on the stream's own request; a route granted on a squatted id is fed through its
token. Real services on loopback, real Run streams; the table's bookkeeping (no local
id outlives its request) is checked directly."""
from __future__ import annotations

import pytest
import torch
from opentelemetry import trace

from bench.conductor_toys import make_b
from runtime import item_proto as wire
from runtime.items import Alive, Cancel, NodeDone, NodeError, NodeOutput, OpenNode, Release
from runtime.request_table import RequestTable
from tests.fixtures.components import Flaky, inline_ref
from tests.fixtures.routes import grant, push
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from transport.codec import view
from transport.config import TransportConfig

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def flaky():
    server = start_in_process(Flaky())  # outputs inline: the test reads them
    yield server
    server.stop()


@pytest.fixture
def shm_flaky():
    server = start_in_process(Flaky(), transport_config=TransportConfig(host_id="test-host", inline_threshold=0))
    yield server
    server.stop()


def _open(rid: str, values, **params) -> OpenNode:
    return OpenNode(request_id=rid, node="echo", inputs={"x": inline_ref(torch.tensor(values))}, params=params)


def _value(ref) -> list[float]:
    return view(ref.location.data, ref.dtype, ref.shape).tolist()


def _until_done(stream: RunStream) -> list:
    events: list = []
    while not any(isinstance(e, (NodeDone, NodeError)) for e in events):
        events += stream.events()
    return events


def test_a_squatted_id_still_opens_its_owners_request(flaky):
    held = flaky.hosted.component.held
    with RunStream(flaky.address) as squatter, RunStream(flaky.address) as owner:
        squatter.send(_open("r1", [0.0], hold=True))
        assert wait_until(lambda: "r1" in held)
        owner.send(_open("r1", [1.0, 2.0]))  # the same id, opened second
        events = _until_done(owner)
        [out] = [e for e in events if isinstance(e, NodeOutput)]
        assert out.request_id == "r1" and _value(out.tensors["x"]) == [1.0, 2.0]
        assert isinstance(events[-1], NodeDone) and events[-1].request_id == "r1"
        # the squatter heard nothing of it: its next answer is about its own probe
        squatter.send(_open("probe", [9.0]))
        assert {e.request_id for e in _until_done(squatter)} == {"probe"}
        assert "r1" in held  # and its own request is untouched
        squatter.send(Cancel("r1"))
    assert wait_until(lambda: describe(flaky.address).num_open_requests == 0)


def test_each_stream_acts_on_its_own_request_under_the_same_id(shm_flaky):
    flaky = shm_flaky
    held = flaky.hosted.component.held
    leases = lambda: flaky.hosted.transport.stats()["num_leases"]  # noqa: E731
    with RunStream(flaky.address) as first, RunStream(flaky.address) as second:
        first.send(_open("r2", [0.0], hold=True))
        assert wait_until(lambda: "r2" in held)
        second.send(_open("r2", [0.0], hold=True))
        assert wait_until(lambda: len(held) == 2)
        local = next(r for r in held if r != "r2")  # the second stream's request, under a local id

        def beats(stream) -> set[str]:
            msg = stream.recv(heartbeats=True)
            return {rid for ev in wire.events_from_proto(msg) if isinstance(ev, Alive) for rid in ev.request_ids}

        assert wait_until(lambda: beats(second) == {"r2"}, 30)  # the id it named, not the local one
        # the second stream's output leases memory for its own request: a Release naming
        # the same id on the first stream frees nothing, its owner's does
        second.send(_open("r2", [3.0], node_run=1))
        out = next(e for e in _until_done(second) if isinstance(e, NodeOutput))
        assert out.request_id == "r2" and leases() == 1
        first.send(Release("r2", (out.tensors["x"].lease_id,)), _open("probe", [0.0], fail="open"))
        assert _until_done(first)[-1].request_id == "probe"  # the stream's items are handled in order
        assert leases() == 1
        second.send(Release("r2", (out.tensors["x"].lease_id,)))
        assert wait_until(lambda: leases() == 0)
        first.send(Cancel("r2"), Cancel("probe"))  # cancels the first stream's own
        assert wait_until(lambda: held == {local})
        second.send(Cancel("r2"))
        assert wait_until(lambda: not held and describe(flaky.address).num_open_requests == 0)
    assert not len(flaky.hosted.step_loop._table.scopes)  # no local id outlives its request


def test_a_route_granted_on_a_squatted_id_is_fed_through_its_token():
    server = start_in_process(make_b())
    try:
        with RunStream(server.address) as squatter, RunStream(server.address) as conductor, \
                RunStream(server.address) as producer:
            squatter.send(grant("r3", token="1" * 32))  # the id first, with a route of its own
            assert wait_until(lambda: describe(server.address).num_open_requests == 1)
            conductor.send(grant("r3"))
            producer.send(push("r3", 3.0, 0), push("r3", 4.0, 1, last=True))  # named as the producer knows it
            events = _until_done(conductor)
            outputs = [e for e in events if isinstance(e, NodeOutput)]
            assert [_value(o.tensors["y"]) for o in outputs] == [[3.0], [4.0]]
            assert {e.request_id for e in events} == {"r3"} and isinstance(events[-1], NodeDone)
            conductor.send(Cancel("r3"))
            squatter.send(Cancel("r3"))
            assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
    finally:
        server.stop()


def test_a_refused_open_leaves_no_local_id_behind():
    table = RequestTable(trace.NoOpTracer(), max_requests=1)
    table.open_run("a", OpenNode("r", "n"))
    item = table.scoped("b", OpenNode("r", "n"))  # "r" is stream a's: b's own request
    assert item.request_id != "r" and table.wire_id(item.request_id) == "r"
    refusal = table.refusal("b", "items[0]", item)
    assert refusal.status == "RESOURCE_EXHAUSTED" and refusal.request_id == "r"  # as b named it
    assert not len(table.scopes)
    item = table.scoped("b", Cancel("r"))  # b opened nothing: a's request is refused to it
    assert item.request_id == "r" and table.refusal("b", "items[0]", item).status == "PERMISSION_DENIED"
    table.drop_request("r", "cancelled")
    mine = table.scoped("b", OpenNode("r", "n"))  # free again: b takes the id itself
    assert mine.request_id == "r"
