"""A component's columnar outputs (NodeOutputs): entries bound only for the client leave
as one OutputRows per stream (one `outputs` event, values stacked as the component
stacked them); the others take the per-output path; either way the reader gets exactly
the NodeOutputs the entries stand for. An entry of a request gone fails nobody else."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InvalidArgument
from protos.starmesh.v1 import component_pb2
from runtime import item_proto as wire
from runtime.items import Cancel, NodeDone, NodeOutput, NodeOutputs, OpenNode
from runtime.output_batch import MAX_BATCH_BYTES, OutputRows
from tests.fixtures.components import inline_ref, inline_tensor
from tests.fixtures.services import RunStream, start_in_process
from transport.config import TransportConfig

pytestmark = pytest.mark.timeout(60)

HOST = "test-host"


class Rows:
    """Answers every run opened since its last step with ONE NodeOutputs (y = 2x, z = x + k),
    then a NodeDone each. It forgets nothing on cancel (a component that lags behind one)."""

    name = "rows"
    nodes = ("rows",)

    def __init__(self) -> None:
        self.opened: list = []

    def open(self, item, inputs) -> None:
        if item.params.get("bad"):
            raise InvalidArgument("params.bad: refused on purpose")
        self.opened.append((item, inputs["x"].clone()))

    def push(self, item, tensors) -> None:
        raise InvalidArgument("rows takes no pushes")

    def cancel(self, request_id: str) -> None:
        pass

    def has_work(self) -> bool:
        return bool(self.opened)

    def step(self):
        runs, self.opened = self.opened, []
        x = torch.cat([x for _, x in runs])  # [N, ...]
        k = torch.arange(len(runs), dtype=x.dtype).reshape(-1, *([1] * (x.dim() - 1)))
        out = NodeOutputs("rows", tuple(i.request_id for i, _ in runs), tuple(i.iteration for i, _ in runs),
                          {"y": x * 2, "z": x + k})
        return [out] + [NodeDone(i.request_id, "rows", iteration=i.iteration) for i, _ in runs]

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def rows():
    server = start_in_process(Rows(), transport_config=TransportConfig(host_id=HOST, inline_threshold=0))
    yield server
    server.stop()


def _open(rid: str, x: torch.Tensor, iteration=(3,), **fields) -> OpenNode:
    return OpenNode(rid, "rows", iteration=iteration, inputs={"x": inline_ref(x)}, **fields)


def _read(stream: RunStream, num_done: int) -> tuple[list[str], dict, list]:
    """The event kinds on the wire, each request's outputs, and its NodeDones' order."""
    kinds, outputs, done = [], {}, []
    while len(done) < num_done:
        msg = stream.recv()
        assert msg is not None, stream.error
        kinds += [e.WhichOneof("kind") for e in msg.events]
        for ev in wire.events_from_proto(msg):
            if isinstance(ev, NodeOutput):
                assert ev.request_id not in done  # an output before its run's end
                outputs.setdefault(ev.request_id, []).append(ev)
            elif isinstance(ev, NodeDone):
                done.append(ev.request_id)
    return kinds, outputs, done


def test_client_only_entries_travel_as_one_event_and_read_back_as_their_outputs(rows):
    xs = {f"r{i}": torch.full((1, 4), float(i)) for i in range(6)}
    with RunStream(rows.address) as stream:
        stream.send(*[_open(rid, x, client_ports=("y", "z")) for rid, x in xs.items()])
        kinds, outputs, done = _read(stream, len(xs))
    assert kinds.count("outputs") == 1 and "output" not in kinds  # one event for the six
    assert sorted(done) == sorted(xs)
    for k, (rid, x) in enumerate(xs.items()):
        (out,) = outputs[rid]
        assert out.iteration == (3,) and out.tensors["y"].kind == "inline"
        assert torch.equal(inline_tensor(out.tensors["y"]), x * 2)
        assert torch.equal(inline_tensor(out.tensors["z"]), x + k)


def test_entries_a_service_reads_take_the_per_output_path_beside_the_client_rows(rows):
    with RunStream(rows.address) as stream:
        stream.send(_open("c0", torch.ones(1, 3), client_ports=("y", "z")),
                    _open("s0", torch.ones(1, 3) * 5, consumer_host_ids=(HOST,)),
                    _open("c1", torch.ones(1, 3) * 7, client_ports=("y", "z")))
        kinds, outputs, _ = _read(stream, 3)
    assert "outputs" in kinds and "output" in kinds
    assert outputs["s0"][0].tensors["y"].kind == "shm"  # by reference, for the reading service
    assert torch.equal(inline_tensor(outputs["c1"][0].tensors["y"]), torch.ones(1, 3) * 14)
    assert torch.equal(inline_tensor(outputs["c1"][0].tensors["z"]), torch.ones(1, 3) * 9)


def test_an_entry_of_a_cancelled_request_fails_nobody_else(rows):
    with RunStream(rows.address) as stream:
        stream.send(*[_open(rid, torch.full((1, 2), float(i)), client_ports=("y", "z"))
                      for i, rid in enumerate("abc")], Cancel("b"))
        kinds, outputs, done = _read(stream, 2)
    assert sorted(outputs) == ["a", "c"] and sorted(done) == ["a", "c"]
    assert torch.equal(inline_tensor(outputs["c"][0].tensors["y"]), torch.full((1, 2), 4.0))


def test_rows_past_the_batch_bound_leave_in_several_events(rows):
    row = torch.zeros(1, 64 * 1024 // 4)  # 64 KiB a row and port: 2 ports, 24 rows = 3 MiB
    n = 24
    with RunStream(rows.address) as stream:
        stream.send(*[_open(f"big{i}", row + i, client_ports=("y", "z")) for i in range(n)])
        kinds, outputs, _ = _read(stream, n)
    assert kinds.count("outputs") >= (2 * n * row.numel() * 4) // MAX_BATCH_BYTES
    assert all(torch.equal(inline_tensor(outputs[f"big{i}"][0].tensors["y"]), (row + i) * 2) for i in range(n))


def test_a_malformed_node_outputs_is_the_component_s_error():
    with pytest.raises(ValueError, match="one row per entry"):
        NodeOutputs("n", ("a", "b"), ((0,), (1,)), {"y": torch.zeros(3, 1)})


DTYPES = [torch.int64, torch.float32, torch.float16, torch.uint8]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), depth=st.integers(0, 3), trailing=st.lists(st.integers(1, 3), max_size=2),
       ports=st.lists(st.sampled_from(DTYPES), min_size=1, max_size=3), seed=st.integers(0, 1 << 16))
def test_output_rows_round_trip_to_the_outputs_they_stand_for(n, depth, trailing, ports, seed):
    """Any requests (repeated, interleaved), iterations and ports: on the wire and back,
    the NodeOutputs one would have sent entry by entry."""
    g = torch.Generator().manual_seed(seed)
    rids = [f"r{int(torch.randint(0, 4, (1,), generator=g))}" for _ in range(n)]
    iterations = [tuple(int(v) for v in torch.randint(0, 1 << 20, (depth,), generator=g)) for _ in range(n)]
    values = {f"p{j}": (torch.randint(0, 200, (n, *trailing), generator=g)).to(dtype) for j, dtype in enumerate(ports)}
    rows = OutputRows("node", rids, iterations, 1.5e15, {p: inline_ref(v) for p, v in values.items()})
    events = [NodeDone("x", "node"), rows, NodeDone("y", "node")]
    msg = component_pb2.RunResponse.FromString(wire.units_to_proto(events).SerializeToString())
    back = wire.events_from_proto(msg)
    expected = [NodeOutput(rids[i], "node", {p: inline_ref(v[i:i + 1]) for p, v in values.items()}, iterations[i],
                           {}, 1.5e15) for i in range(n)]
    assert back == [events[0], *expected, events[2]]
    assert rows.outputs == expected


def test_the_engine_thread_hands_client_rows_on_as_one_unit_and_the_rest_one_by_one():
    """What the step loop gives a stream: an OutputRows for the client-only entries (one
    export per port, values as stacked), a NodeOutput for the entry a service reads."""
    import threading

    from runtime.step_loop import StepLoop
    from transport.transport import Transport

    got, lock, seen = [], threading.Lock(), threading.Event()

    def sink(events) -> None:
        with lock:
            got.extend(events or [])
            if sum(isinstance(e, NodeDone) for e in got) == 3:
                seen.set()

    transport = Transport(TransportConfig(host_id=HOST, inline_threshold=0))
    loop = StepLoop(Rows(), transport)
    loop.start()
    try:
        loop.attach("s", sink)
        loop.submit("s", [(f"items[{i}]", item) for i, item in enumerate([
            _open("a", torch.ones(1, 2), client_ports=("y", "z")),
            _open("b", torch.ones(1, 2) * 3, consumer_host_ids=(HOST,)),
            _open("c", torch.ones(1, 2) * 5, client_ports=("y", "z"))])])
        assert seen.wait(30)
    finally:
        loop.stop(10)
        transport.close()
    units = [e for e in got if not isinstance(e, NodeDone)]
    assert [type(u).__name__ for u in units] == ["NodeOutput", "OutputRows"]
    assert units[0].request_id == "b" and units[0].tensors["y"].kind == "shm"
    rows = units[1]
    assert rows.request_ids == ["a", "c"] and rows.iterations == [(3,), (3,)]
    assert torch.equal(inline_tensor(rows.tensors["y"]), torch.tensor([[2.0, 2.0], [10.0, 10.0]]))
