"""Malformed TensorRefs fail their request with INVALID_ARGUMENT / NOT_FOUND naming
the field; the same stream then still serves a valid request."""
from __future__ import annotations

import pytest
import torch

from protos.starmesh.v1 import component_pb2, tensor_pb2
from runtime import item_proto as wire
from runtime.items import NodeError, NodeOutput, OpenNode
from tests.fixtures.components import inline_ref, inline_tensor
from tests.fixtures.services import RunStream, describe
from transport.config import TransportConfig
from transport.refs import ShmLocation, TensorRef
from transport.transport import Transport

pytestmark = pytest.mark.timeout(60)


def _request(rid: str, tensor_pb) -> component_pb2.RunRequest:
    req = component_pb2.RunRequest()
    o = req.items.add().open
    o.request_id, o.node = rid, "echo"
    o.inputs.add(name="x").tensor.CopyFrom(tensor_pb)
    return req


def _tensor_pb(**fields) -> tensor_pb2.TensorRef:
    return tensor_pb2.TensorRef(**fields)


def _shm_pb(arena: str, offset: int, nbytes: int, lease_id: int, host_id: str, shape=(4,)):
    shm = dict(arena=arena, offset=offset, nbytes=nbytes, lease_id=lease_id, host_id=host_id)
    return _tensor_pb(dtype=1, shape=list(shape), shm=shm)


def _assert_rejected_then_serves(stream: RunStream, req, status: str, field: str, words: str) -> None:
    stream.send(req)
    events = stream.events()
    errors = [e for e in events if isinstance(e, NodeError)]
    assert len(errors) == 1, events
    err = errors[0]
    assert (err.request_id, err.status) == ("bad", status), err
    assert field in err.message and words in err.message, err.message
    stream.send(OpenNode(request_id="good", node="echo", inputs={"x": inline_ref(torch.ones(3))}))
    (out, _done) = stream.events()
    assert isinstance(out, NodeOutput) and torch.equal(inline_tensor(out.tensors["x"]), torch.ones(3))


def test_unknown_dtype_value(echo_server):
    with RunStream(echo_server.address) as stream:
        req = _request("bad", _tensor_pb(dtype=42, shape=[2], inline_bytes=b"\0\0"))
        _assert_rejected_then_serves(stream, req, "INVALID_ARGUMENT", "items[0].open.inputs[x].dtype", "42")


def test_nbytes_does_not_match_shape(echo_server):
    with RunStream(echo_server.address) as stream:
        req = _request("bad", _tensor_pb(dtype=1, shape=[4], inline_bytes=b"\0" * 8))
        _assert_rejected_then_serves(stream, req, "INVALID_ARGUMENT", "items[0].open.inputs[x]", "nbytes")


def test_missing_location_and_empty_request_id(echo_server):
    with RunStream(echo_server.address) as stream:
        req = _request("bad", _tensor_pb(dtype=1, shape=[1]))
        _assert_rejected_then_serves(stream, req, "INVALID_ARGUMENT", "items[0].open.inputs[x].location", "none")
        req = _request("", _tensor_pb(dtype=1, shape=[1], inline_bytes=b"\0" * 4))
        stream.send(req)
        (err,) = stream.events()
        assert err.status == "INVALID_ARGUMENT" and "items[0].open.request_id" in err.message


def test_unknown_arena(echo_server):
    host_id = describe(echo_server.address).host_id
    with RunStream(echo_server.address) as stream:
        req = _request("bad", _shm_pb("starmesh-doesnotexist", 64, 16, 1, host_id))
        _assert_rejected_then_serves(stream, req, "NOT_FOUND", "items[0].open.inputs[x]", "does not exist")


@pytest.fixture
def producer():
    """A producer arena in the test process, with one leased float32[4] tensor."""
    t = Transport(TransportConfig(host_id="test-host", inline_threshold=0))
    ref = t.export(torch.arange(4.0), request_id="prod", carrier="test")
    yield t, ref
    t.release_request("prod")
    t.close()


def test_shm_offset_out_of_range(echo_server, producer):
    t, ref = producer
    loc = ref.location
    with RunStream(echo_server.address) as stream:
        req = _request("bad", _shm_pb(loc.arena, 1 << 40, loc.nbytes, loc.lease_id, loc.host_id))
        _assert_rejected_then_serves(stream, req, "INVALID_ARGUMENT", "items[0].open.inputs[x]", "offset")


def test_released_lease_is_not_found(echo_server, producer):
    t, ref = producer
    loc = ref.location
    with RunStream(echo_server.address) as stream:
        stale = TensorRef(ref.dtype, ref.shape, ShmLocation(loc.arena, loc.offset, loc.nbytes, loc.lease_id + 7, loc.host_id))
        req = wire.items_to_proto([OpenNode(request_id="bad", node="echo", inputs={"x": stale})])
        _assert_rejected_then_serves(stream, req, "NOT_FOUND", "items[0].open.inputs[x]", "lease_id")


def test_valid_shm_input_is_consumed_and_acknowledged(echo_server, producer):
    t, ref = producer
    with RunStream(echo_server.address) as stream:
        stream.send(OpenNode(request_id="ok", node="echo", inputs={"x": ref}))
        out, done = stream.events()
        assert torch.equal(inline_tensor(out.tensors["x"]), torch.arange(4.0))
        assert [(c.arena, c.lease_id) for c in done.consumed] == [(ref.location.arena, ref.lease_id)]
        t.release([c.lease_id for c in done.consumed], request_id="prod")
        assert t.stats()["num_leases"] == 0
