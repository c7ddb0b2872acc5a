"""A batch of outputs of a node that only feeds the client is forwarded as rows
(runtime.received_rows, WalkState.on_rows, RequestEvents.of_rows): the request's walk
state ends exactly as the outputs one by one would leave it (credits, chunk order), and
the client gets exactly the events they would make. Chunks out of order, kept outputs and
outputs the client reads as typed events take the per-entry path."""
from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.conductor_client import make_request
from bench.conductor_toys import PIPELINE_INNER_LOOPS, make_a, make_b, make_c, pipeline_graph
from conductor.client_events import RequestEvents, WantedOutputs
from conductor.client_outputs import ClientOutputs
from conductor.client_queue import ClientQueue
from conductor.model import ServedModel
from conductor.placement import Placement
from conductor.service import ConductorService
from conductor.session_generate import TurnEvents
from conductor.walk_scope import WalkScope
from conductor.walk_state import WalkState
from graph.chunking import FixedChunk
from graph.composites import Loop, Sequential
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge as S
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph
from protos.starmesh.v1 import conductor_pb2, conductor_pb2_grpc
from runtime.background import BackgroundServer
from runtime.items import NodeOutput
from runtime import item_proto as wire
from runtime.output_batch import outputs_from_proto
from runtime.received_rows import COMPACT_BYTES, RowsView, read_rows
from tests.fixtures.services import start_in_process
from transport.codec import inline_ref

pytestmark = pytest.mark.timeout(120)

DTYPES = [torch.float32, torch.int64, torch.uint8, torch.float16]


def _walk(ports: tuple[str, ...]) -> WalkScope:
    """src (a loop inside its component) ~routed~> sink -> one walk output per port."""
    nodes = [N("src", ("n",), ("x",)), N("sink", ("y",), ports)]
    edges = [E("input.n", "src.n"), S("src.x", "sink.y", chunk_policy=FixedChunk(1))]
    walk = Walk("w", Sequential(Loop("gen", "src", max_iters=64), "sink"),
                edges + [E(f"sink.{p}", f"output.{p}") for p in ports])
    WalkGraph("g", nodes, [walk])
    return WalkScope(walk, frozenset({"gen"}), frozenset(), lambda *_: True)


def _batch(outputs: list[NodeOutput]):
    """The outputs (two or more, of one node and ports) as the one OutputBatch a Run stream carries."""
    events = wire.events_to_proto(outputs).events
    assert len(events) == 1 and events[0].HasField("outputs")
    return events[0].outputs


def _seen(emitted) -> list[tuple]:
    """The emitted outputs, a RowsView as its entries' values, each as comparable bytes."""
    out = []
    for name, value in emitted:
        for ref in (value.refs() if isinstance(value, RowsView) else [value]):
            out.append((name, ref.dtype, tuple(ref.shape), bytes(ref.location.data)))
    return out


def _state(scope: WalkScope, silent=frozenset(), keep=False) -> WalkState:
    state = WalkState(scope, {"n": (torch.tensor([0.0]),)}, client_room=lambda: 1000, silent=silent,
                      keep_outputs=keep)
    state.credits.initial("sink", ())  # the routed chunk runs' client credit, as a dispatch grants it
    return state


def _ledger(state: WalkState) -> tuple:
    return state.credits.reserved, dict(state.credits.outstanding), dict(state.next_seq), \
        {k: sorted(v) for k, v in state.held.items() if v}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), num_ports=st.integers(1, 2), dtype=st.sampled_from(DTYPES), trailing=st.sampled_from([(), (3,)]),
       counts=st.lists(st.integers(1, 3), min_size=1, max_size=10), split=st.integers(0, 10),
       shuffled=st.booleans(), keep=st.booleans(), silent_first=st.booleans())
def test_rows_leave_the_walk_state_as_the_outputs_one_by_one(data, num_ports, dtype, trailing, counts, split,
                                                             shuffled, keep, silent_first):
    ports = ("z", "w")[:num_ports]
    scope = _walk(ports)
    silent = frozenset({"z"}) if silent_first and num_ports == 2 else frozenset()
    order = list(range(len(counts)))
    if shuffled:
        order = data.draw(st.permutations(order))
    outputs = [NodeOutput("r", "sink", {p: inline_ref((torch.arange(c * max(1, sum(trailing))) + 7 * k + j)
                                                      .reshape((c,) + trailing).to(dtype))
                                        for j, p in enumerate(ports)}, (k,), {}, 1.0)
               for k, c in ((k, counts[k]) for k in order)]
    by_rows, one_by_one = _state(scope, silent, keep), _state(scope, silent, keep)
    taken = []
    for part in (outputs[:split], outputs[split:]):  # two batches: the second goes on from the first
        if len(part) < 2:  # a lone output travels as one NodeOutput
            for out in part:
                by_rows.on_output(out.node, out.iteration, out.tensors, out.produced_us)
                one_by_one.on_output(out.node, out.iteration, out.tensors, out.produced_us)
            continue
        rows = read_rows(_batch(part), "batch")
        entries = list(range(len(part)))
        took = by_rows.on_rows(rows, entries)
        taken.append(took)
        if not took:  # what Executor._collect_rows does then
            for i in entries:
                by_rows.on_output("sink", rows.iterations[i], rows.output(i).tensors, 1.0)
        for out in outputs_from_proto(_batch(part), "batch"):
            one_by_one.on_output(out.node, out.iteration, out.tensors, out.produced_us)
    assert _seen(by_rows.take_emitted()) == _seen(one_by_one.take_emitted())
    assert _ledger(by_rows) == _ledger(one_by_one)
    assert by_rows.outputs.keys() == one_by_one.outputs.keys()
    if not shuffled and not keep:  # in chunk order, nothing kept: every batch went as rows
        assert all(taken)
    if keep:
        assert not any(taken)


@pytest.fixture(scope="module")
def omni(tmp_path_factory):
    from transformers import AutoTokenizer

    from cluster.registry import build_model
    from engine.models.qwen3_omni.tiny import write_omni_tokenizer

    directory = tmp_path_factory.mktemp("tok")
    write_omni_tokenizer(directory)
    nodes = ["prefill", "decode", "talker", "code2wav"]
    placement = Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}},
                                     "placement": {n: "s" for n in nodes}, "kv_contexts": {"s": ["prefill", "decode"]}})
    outputs = ClientOutputs()
    yield build_model("qwen3-omni", "omni", placement, {}), outputs, AutoTokenizer.from_pretrained(str(directory))
    outputs.close()


@pytest.mark.parametrize("name", ["codes", "token", "audio"])
@pytest.mark.parametrize("wanted", [WantedOutputs(), WantedOutputs(frozenset({"text"})),
                                    WantedOutputs(frozenset({"text"}), frozenset({"codes", "audio"}))])
@pytest.mark.parametrize("form", [None, TurnEvents])
def test_rows_make_the_events_their_outputs_make(omni, name, wanted, form):
    model, outputs, tokenizer = omni
    values = {"codes": [torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6, 7, 8])],
              "token": [torch.tensor([65]), torch.tensor([66, 67])],
              "audio": [torch.full((48,), 0.25), torch.full((24,), -0.5)]}[name]
    batch = _batch([NodeOutput("r", "sink", {name: inline_ref(v)}, (k,), {}, 1.0) for k, v in enumerate(values)])
    rows = RowsView(read_rows(batch, "batch").columns[name], [0, 1])
    extra = {"form": form} if form is not None else {}
    as_rows, one_by_one = (RequestEvents(model, outputs, "r", tokenizer, wanted, t0=0.0, **extra) for _ in range(2))
    got = as_rows.of_rows(name, rows, 0.5) + as_rows.end(1.0)
    want = [ev for ref in rows.refs() for ev in one_by_one.of(name, ref, 0.5)] + one_by_one.end(1.0)
    assert [_comparable(ev) for ev in got] == [_comparable(ev) for ev in want]


def _comparable(event):
    if isinstance(event, conductor_pb2.GenerateEvent):
        if event.HasField("usage"):
            event.usage.latency_ms = 0.0
        return event.SerializeToString(deterministic=True)
    return repr(event)


def test_a_batch_that_does_not_hold_together_fails_each_request_it_names():
    outputs = [NodeOutput(f"r{k % 2}", "sink", {"z": inline_ref(torch.tensor([float(k)]))}, (k,), {}, 1.0)
               for k in range(3)]
    msg = wire.events_to_proto(outputs)
    msg.events[0].outputs.columns[0].rows = np.array([1, 1, 2], dtype="<u4").tobytes()  # 4 rows for 3 values
    for rows in (True, False):
        errors = wire.events_from_proto(msg, rows=rows)
        assert [(e.request_id, e.status) for e in errors] == [("r0", "INVALID_ARGUMENT"), ("r1", "INVALID_ARGUMENT")]
        assert all("events[0].outputs.columns[0].values" in e.message for e in errors)


def test_the_client_backlog_counts_each_row():
    rows = read_rows(_batch([NodeOutput("r", "sink", {"z": inline_ref(torch.tensor([float(k)]))}, (k,), {}, 1.0)
                             for k in range(3)]), "batch")
    queue = ClientQueue()
    queue.extend([("z", RowsView(rows.columns["z"], [0, 1, 2])), ("z", rows.columns["z"].ref(0))])
    assert len(queue) == 4
    taken, end = asyncio.run(queue.take())
    assert len(taken) == 2 and end is None and len(queue) == 0


def test_a_view_of_part_of_a_large_batch_holds_only_its_own_rows():
    """A slow client's queued views never keep other requests' rows alive."""
    outputs = [NodeOutput(f"r{k % 3}", "sink", {"z": inline_ref(torch.full((1, 8192), float(k)))}, (k,), {}, 1.0)
               for k in range(6)]  # 32 KiB each: a 192 KiB column
    column = read_rows(_batch(outputs), "batch").columns["z"]
    assert len(column.data) > COMPACT_BYTES
    part, whole = RowsView(column, [1, 4]), RowsView(column, list(range(6)))
    assert len(part.column.data) == 2 * 8192 * 4 and whole.column is column
    assert [bytes(r.location.data) for r in part.refs()] == [bytes(column.ref(i).location.data) for i in (1, 4)]
    assert [r.shape for r in part.refs()] == [(1, 8192)] * 2


@pytest.fixture(scope="module")
def mesh():
    services = {"a": start_in_process(make_a()), "b": start_in_process(make_b()), "c": start_in_process(make_c())}
    placement = Placement.from_dict({"services": {k: {"replicas": [s.address]} for k, s in services.items()},
                                     "placement": {"src": "a", "mid": "b", "sink": "c"}})
    conductor = BackgroundServer(ConductorService([ServedModel("pipe", pipeline_graph(40), placement,
                                                               PIPELINE_INNER_LOOPS)]))
    conductor.start()
    yield conductor
    conductor.stop()
    for s in services.values():
        s.stop()


def test_concurrent_requests_get_every_item_in_order_through_the_mesh(mesh):
    """C's sink answers a step's items as one batch of rows for many requests; each client
    gets its own 40 tensor events, in order, values as sent, then a Usage that counts them."""
    async def one(stub, rid: str, batches: bool):
        req = make_request("pipe", rid, {})
        if batches:
            return [ev async for batch in stub.GenerateBatches(req) for ev in batch.events]
        return [ev async for ev in stub.Generate(req)]

    async def main():
        async with grpc.aio.insecure_channel(mesh.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)
            return await asyncio.gather(*(one(stub, f"rows-{i}", i % 2 == 0) for i in range(12)))

    for events in asyncio.run(main()):
        tensors = [ev.tensor for ev in events if ev.WhichOneof("kind") == "tensor"]
        assert [t.name for t in tensors] == ["z"] * 40
        assert [np.frombuffer(t.tensor.inline_bytes, "<f4").tolist() for t in tensors] == [[float(k)]
                                                                                           for k in range(1, 41)]
        assert all(list(t.tensor.shape) == [1] for t in tensors)
        assert events[-1].usage.metrics["num_outputs"] == 40

