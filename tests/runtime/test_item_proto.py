"""runtime.item_proto: Run items and events <-> protobuf, with errors naming the field."""
from __future__ import annotations

import pytest
import torch

from protos.starmesh.v1 import component_pb2
from runtime import item_proto as wire
from core.pace import Pace
from runtime.items import (Cancel, ConsumedLease, ContextOp, NodeDone, NodeError, NodeOutput, OpenNode, PushChunk, Release,
                           Repace, StopRule)
from tests.fixtures.components import inline_ref
from core.errors import InvalidArgument
from transport.refs import ShmLocation, TensorRef


def test_inbound_items_round_trip():
    shm = TensorRef("bfloat16", (2, 3), ShmLocation("starmesh-ab", 128, 12, 7, "h1"))
    items = [
        OpenNode(
            request_id="r", node="n", walk="w", iteration=(1, 2), inputs={"a": inline_ref(torch.ones(2)), "b": shm},
            params={"temperature": 0.5, "tags": ["x"]}, max_iters=5,
            stop_rule=StopRule(stop_token_ids=(1, 2), component_predicate="p"),
            traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01", tracestate="k=v", consumer_host_ids=("h2",),
            client_ports=("token",), pace=Pace(1.7e9 + 0.25, 0.08, first_item=29, lead_items=25),
        ),
        PushChunk("r", "n", "audio", (3,), {"c": inline_ref(torch.zeros(0))}, end_of_stream=True),
        Cancel("r", "client went away"),
        Release("r", (1, 2, 3)),
        Repace("r", 1.7e9 + 1.5),
        ContextOp("ctx_" + "a" * 32, "owner/user", 42),
    ]
    back = [item for _field, item in wire.request_from_proto(wire.items_to_proto(items))]
    assert back == items


def test_outbound_events_round_trip():
    events = [
        NodeOutput("r", "n", {"y": inline_ref(torch.arange(3))}, (0,), {"finish": "stop"}),
        NodeError("r", "n", "INVALID_ARGUMENT", "items[0].open.inputs[x].dtype: bad"),
        NodeDone("r", "n", (ConsumedLease("starmesh-ab", 7),)),
    ]
    assert wire.events_from_proto(wire.events_to_proto(events)) == events


def test_a_bad_item_is_rejected_alone():
    req = wire.items_to_proto([OpenNode(request_id="ok", node="n"), Cancel("c")])
    bad = req.items.add().open
    bad.request_id, bad.node = "bad", "n"
    bad.inputs.add(name="x").tensor.dtype = 1  # no location
    dup = req.items.add().open
    dup.request_id, dup.node = "dup", "n"
    for _ in range(2):
        dup.inputs.add(name="x").tensor.inline_bytes = b"\0" * 4
        dup.inputs[-1].tensor.dtype = 1
        dup.inputs[-1].tensor.shape.append(1)
    req.items.add()  # no kind
    out = wire.request_from_proto(req)
    assert [f for f, _ in out] == [f"items[{i}]" for i in range(5)]
    assert isinstance(out[0][1], OpenNode) and isinstance(out[1][1], Cancel)
    rejected = [item for _f, item in out[2:]]
    assert all(isinstance(r, wire.Rejected) and r.status == "INVALID_ARGUMENT" for r in rejected)
    assert rejected[0].request_id == "bad" and "items[2].open.inputs[x].location" in rejected[0].message
    assert "items[3].open.inputs[x]: duplicate" in rejected[1].message
    assert "items[4]: none of open" in rejected[2].message


def test_params_must_be_struct_values():
    with pytest.raises(InvalidArgument, match="open.params"):
        wire.items_to_proto([OpenNode(request_id="r", node="n", params={"t": torch.ones(1)})])


def test_status_names_and_values():
    assert wire.status_name(wire.status_value("RESOURCE_EXHAUSTED")) == "RESOURCE_EXHAUSTED"
    assert wire.status_value("NOT_A_STATUS") == wire.status_value("INTERNAL")
    assert component_pb2.NodeError(code=wire.status_value("NOT_FOUND")).code == 5


def test_a_bad_pace_names_its_field():
    req = wire.items_to_proto([OpenNode(request_id="r", node="n", pace=Pace(1.0, 0.08))])
    req.items[0].open.pace.item_s = 0.0
    req.items.add().repace.origin_unix_s = 1.0  # no request id
    out = wire.request_from_proto(req)
    assert isinstance(out[0][1], wire.Rejected) and "items[0].open.pace.item_s must be > 0" in out[0][1].message
    assert isinstance(out[1][1], wire.Rejected) and "request_id is required" in out[1][1].message


def test_consecutive_outputs_travel_as_one_batch_and_come_back_equal():
    events = [NodeOutput(f"r{i}", "n", {"y": inline_ref(torch.arange(i, dtype=torch.int64)),
                                        "z": inline_ref(torch.full((1, 2), float(i)))}, (7, i), {}, 1e15 + i)
              for i in range(5)]
    events.insert(3, NodeDone("r9", "n"))  # closes the first batch: the order of events is kept
    events.append(NodeOutput("r5", "n", {"y": inline_ref(torch.zeros(2, dtype=torch.int32))}, (7, 5)))  # other dtype
    msg = wire.events_to_proto(events)
    assert [e.WhichOneof("kind") for e in msg.events] == ["outputs", "done", "outputs", "output"]
    assert wire.events_from_proto(component_pb2.RunResponse.FromString(msg.SerializeToString())) == events


def test_an_output_batch_that_does_not_hold_together_fails_each_of_its_requests():
    events = [NodeOutput(f"r{i}", "n", {"y": inline_ref(torch.arange(3))}, (i,)) for i in range(3)]
    msg = wire.events_to_proto(events)
    msg.events[0].outputs.columns[0].rows = msg.events[0].outputs.columns[0].rows[:-4]  # one entry's count gone
    back = wire.events_from_proto(msg)
    assert [(e.request_id, e.status) for e in back] == [(f"r{i}", "INVALID_ARGUMENT") for i in range(3)]
    assert "events[0].outputs.columns[0].rows: 2 values for 3" in back[0].message
