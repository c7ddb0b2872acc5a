"""A Run message that does not decode ends its stream with INVALID_ARGUMENT naming the
message (not OK, not UNKNOWN), after what the stream had already earned; a bad item in
a message that decodes fails only its own request, as a NodeError."""
from __future__ import annotations

import grpc
import pytest
import torch

from protos.starmesh.v1 import component_pb2
from runtime.item_proto import items_to_proto
from runtime.items import OpenNode
from tests.fixtures.components import inline_ref

pytestmark = pytest.mark.timeout(60)
RUN = "/starmesh.v1.Component/Run"


def _open(rid: str) -> bytes:
    item = OpenNode(request_id=rid, node="echo", inputs={"x": inline_ref(torch.arange(4.0))})
    return items_to_proto([item]).SerializeToString()


def _run(address: str, messages: list[bytes]):
    """(status, details, every event) of one Run stream of raw messages."""
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(RUN)(iter(messages), timeout=30)
        events = []
        try:
            for raw in call:
                events += list(component_pb2.RunResponse.FromString(raw).events)
        except grpc.RpcError as e:
            return e.code(), e.details(), events
        return grpc.StatusCode.OK, "", events


@pytest.mark.parametrize("corrupt", [b"\xff\xff\xff", _open("cut")[:-3], b"\x0a\xff\xff\xff\xff\x0f"])
def test_bytes_that_do_not_decode_end_the_stream_with_invalid_argument(echo_server, corrupt):
    code, details, _ = _run(echo_server.address, [corrupt])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "Run" in details and "do not decode" in details


def test_a_bad_item_fails_only_its_request_and_the_stream_stays_ok(echo_server):
    bad = component_pb2.RunRequest()
    o = bad.items.add().open
    o.request_id, o.node = "bad", "echo"
    o.inputs.add(name="x").tensor.inline_bytes = b"123"  # dtype unspecified, 3 bytes
    code, _, events = _run(echo_server.address, [bad.SerializeToString() + _open("good")])
    assert code == grpc.StatusCode.OK
    errors = [e.error for e in events if e.WhichOneof("kind") == "error"]
    assert [e.request_id for e in errors] == ["bad"] and "items[0].open.inputs[x]" in errors[0].message
    assert {e.done.request_id for e in events if e.WhichOneof("kind") == "done"} == {"good"}


def test_the_server_serves_the_next_stream(echo_server):
    _run(echo_server.address, [b"\xff"])
    code, _, events = _run(echo_server.address, [_open("after")])
    assert code == grpc.StatusCode.OK and any(e.WhichOneof("kind") == "done" for e in events)
