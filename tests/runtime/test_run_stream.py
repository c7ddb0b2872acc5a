"""The Run stream of a component service: batching, failure isolation, lifecycle."""
from __future__ import annotations

import pytest
import torch

from protos.starmesh.v1 import component_pb2
from runtime.items import Cancel, NodeDone, NodeError, NodeOutput, OpenNode, Release
from tests.fixtures.components import Echo, inline_ref, inline_tensor
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from transport.config import TransportConfig
from transport.transport import Transport

pytestmark = pytest.mark.timeout(60)


def _open(rid: str, node: str = "echo", **params) -> OpenNode:
    return OpenNode(request_id=rid, node=node, inputs={"x": inline_ref(torch.arange(4.0))}, params=params)


def _by_kind(events):
    out = {NodeOutput: [], NodeError: [], NodeDone: []}
    for ev in events:
        out[type(ev)].append(ev)
    return out[NodeOutput], out[NodeError], out[NodeDone]


def test_five_requests_in_one_message_come_back_in_one_message(echo_server):
    with RunStream(echo_server.address) as stream:
        stream.send(*[_open(f"r{i}") for i in range(5)])
        outputs, errors, dones = _by_kind(stream.events())
        assert not errors
        assert sorted(o.request_id for o in outputs) == [f"r{i}" for i in range(5)]
        assert sorted(d.request_id for d in dones) == [f"r{i}" for i in range(5)]
        for o in outputs:
            assert torch.equal(inline_tensor(o.tensors["x"]), torch.arange(4.0))


def test_component_exceptions_fail_only_their_requests(flaky_server):
    with RunStream(flaky_server.address) as stream:
        stream.send(_open("bad-open", fail="open"), _open("good-1"))
        outputs, errors, dones = _by_kind(stream.events())
        assert [(e.request_id, e.status) for e in errors] == [("bad-open", "INTERNAL")]
        assert "flaky open" in errors[0].message
        assert [o.request_id for o in outputs] == ["good-1"]
        # A failing step fails every request of that step, and the engine thread survives.
        stream.send(_open("bad-step", fail="step"), _open("good-2"))
        _, errors, _ = _by_kind(stream.events())
        assert sorted((e.request_id, e.status) for e in errors) == [("bad-step", "INTERNAL"), ("good-2", "INTERNAL")]
        stream.send(_open("after"))
        outputs, errors, _ = _by_kind(stream.events())
        assert not errors and [o.request_id for o in outputs] == ["after"]


def test_half_close_ends_the_stream_after_open_runs_end(echo_server):
    with RunStream(echo_server.address) as stream:
        stream.send(_open("h1"))
        stream.half_close()
        outputs, _, dones = _by_kind(stream.events())
        assert [o.request_id for o in outputs] == ["h1"] and [d.request_id for d in dones] == ["h1"]
        assert stream.recv() is None and stream.error is None


def test_push_to_a_node_that_is_not_open_is_rejected(echo_server):
    with RunStream(echo_server.address) as stream:
        req = component_pb2.RunRequest()
        req.items.add().push.MergeFrom(component_pb2.PushChunk(request_id="nope", node="echo", port="x"))
        stream.send(req)
        (err,) = stream.events()
        assert err.status == "FAILED_PRECONDITION" and "items[0].push" in err.message


def test_a_push_that_crosses_its_runs_end_is_dropped(echo_server):
    """A producer streaming on after its consumer's run ended (a talker at codec EOS while
    the thinker still talks): the late chunk is dropped, not an error failing the request."""
    with RunStream(echo_server.address) as stream:
        stream.send(_open("late"))
        _, errors, dones = _by_kind(stream.events())
        assert not errors and [d.request_id for d in dones] == ["late"]
        req = component_pb2.RunRequest()
        req.items.add().push.MergeFrom(component_pb2.PushChunk(request_id="late", node="echo", port="x"))
        stream.send(req)
        stream.send(_open("after"))
        outputs, errors, _ = _by_kind(stream.events())
        assert not errors and [o.request_id for o in outputs] == ["after"]


def test_cancel_and_broken_stream_drop_held_requests(flaky_server):
    with RunStream(flaky_server.address) as stream:
        stream.send(_open("held", hold=True))
        assert wait_until(lambda: describe(flaky_server.address).num_open_requests == 1)
        stream.send(Cancel("held", "test"))
        assert wait_until(lambda: describe(flaky_server.address).num_open_requests == 0)
        stream.send(_open("held-2", hold=True))
        assert wait_until(lambda: describe(flaky_server.address).num_open_requests == 1)
    # close() broke the stream: the service cancelled what it carried.
    assert wait_until(lambda: describe(flaky_server.address).num_open_requests == 0)
    assert flaky_server.hosted.component.held == set()


@pytest.fixture
def shm_echo():
    """An echo service that puts every output in its arena (inline_threshold=0)."""
    server = start_in_process(Echo(), transport_config=TransportConfig(host_id="test-host", inline_threshold=0))
    yield server
    server.stop()


def test_outputs_are_leased_until_released_or_the_stream_breaks(shm_echo):
    consumer = Transport(TransportConfig(host_id="test-host"))
    service_transport = shm_echo.hosted.transport
    try:
        with RunStream(shm_echo.address) as stream:
            stream.send(_open("a"))
            (out, done) = stream.events()
            ref = out.tensors["x"]
            assert ref.kind == "shm" and done.request_id == "a"
            resolved = consumer.resolve(ref)
            assert torch.equal(resolved.tensor, torch.arange(4.0))
            resolved.close()
            assert service_transport.stats()["num_leases"] == 1
            stream.send(Release("a", (ref.lease_id,)))
            assert wait_until(lambda: service_transport.stats()["num_leases"] == 0)
            stream.send(_open("b"))
            stream.events()
            assert service_transport.stats()["num_leases"] == 1
        # The stream that carried b's lease broke: the lease is freed without a Release.
        assert wait_until(lambda: service_transport.stats()["num_leases"] == 0)
    finally:
        consumer.close()
