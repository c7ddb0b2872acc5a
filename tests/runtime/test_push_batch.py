"""One engine step's pushes to a peer travel as ONE columnar PushBatch: entries as numpy
columns, every entry's rows stacked in one tensor. Any interleaving of routes, stream
positions, contexts and ends round-trips the wire exactly; an entry the consumer refuses
fails its own request alone; a shared-memory batch is one lease that each request holds
a share of."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.conductor_toys import make_b
from core.errors import InvalidArgument
from protos.starmesh.v1 import component_pb2 as pb
from runtime.batch_in import entries, resolve_rows
from runtime.item_proto import items_to_proto, request_from_proto
from runtime.items import AcceptRoute, Cancel, NodeDone, NodeError, NodeOutput, OpenNode, PushChunk, RouteCredit
from runtime.push_batch import END_OF_STREAM, RECORD, BatchBuilder, PushBatch, layout, route_id
from runtime.route_in import InRoute
from tests.fixtures.routes import grant
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from transport.codec import inline_ref, view
from transport.config import TransportConfig
from transport.transport import Transport

pytestmark = pytest.mark.timeout(60)

DTYPES = (torch.float32, torch.int64, torch.bfloat16, torch.uint8)


@st.composite
def step_pushes(draw):
    """A producer step's chunks: (token, request, start, context, pad, end, rows or None)."""
    dtype = draw(st.sampled_from(DTYPES))
    trailing = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    out = []
    for i in range(draw(st.integers(1, 12))):
        token = f"t{draw(st.integers(0, 5))}"  # several chunks of one route in a step may interleave
        n = draw(st.integers(0, 4))
        context = draw(st.integers(0, n))
        rows = None if n == 0 else (torch.arange(n * max(1, int(np.prod(trailing))), dtype=torch.float64) + i * 100
                                    ).to(dtype).reshape(n, *trailing)
        out.append((token, f"req-{token}", draw(st.integers(0, 1 << 40)), context, draw(st.integers(0, 3)),
                    draw(st.booleans()), rows))
    return out


def _wire(batches: list) -> list:
    msg = pb.RunRequest.FromString(items_to_proto(batches, "p").SerializeToString())
    return [item for _, item in request_from_proto(msg, 7.0)]


@pytest.fixture(scope="module")
def inline_transport():
    t = Transport(TransportConfig(mode="inline"))
    yield t
    t.close()


@settings(max_examples=60, deadline=None)
@given(pushes=step_pushes())
def test_any_interleaving_round_trips_the_wire_exactly(inline_transport, pushes):
    builder = BatchBuilder()
    for token, rid, start, context, pad, end, rows in pushes:
        produced = tuple(float(start + j) for j in range((0 if rows is None else rows.shape[0]) - context))
        builder.add(token, rid, start, context if rows is not None else 0, pad, end, produced, rows)
    [batch] = _wire(builder.build(lambda rows, shares: inline_ref(rows)))
    assert isinstance(batch, PushBatch) and batch.received_us == 7.0
    rows, shared, checked = resolve_rows(inline_transport, batch, "items[0].batch")
    assert shared is None
    got = list(entries(batch, rows, shared, checked, {}))
    want = [p for p in pushes if p[6] is not None] + [p for p in pushes if p[6] is None]  # rowless entries last
    assert len(got) == len(want)
    for (rid, push, values), (token, _, start, context, pad, end, t) in zip(got, want):
        assert rid == route_id(token) and push.start == start and push.num_pad == pad and push.end_of_stream == end
        if t is None:
            assert values is None and push.produced_us == ()
        else:
            assert push.num_context == context and torch.equal(values.rows, t)
            assert push.produced_us == tuple(float(start + j) for j in range(t.shape[0] - context))


def test_an_entry_of_a_granted_route_is_the_push_its_grant_names(inline_transport):
    """Every field of an entry's push (built without PushChunk's __init__) is the one a
    PushChunk of the route's identity and the entry's columns has."""
    route = InRoute(AcceptRoute("tok", OpenNode("req-1", "mid", iteration=(2,)), "x"), owner="s")
    builder = BatchBuilder()
    builder.add("tok", "req-1", 5, 1, 2, True, (9.0,), torch.ones(2, 3))
    [built] = builder.build(lambda rows, shares: inline_ref(rows))
    batch = PushBatch(built.entries, built.produced_us, built.rows, received_us=3.0)
    rows, shared, checked = resolve_rows(inline_transport, batch, "items[0].batch")
    [(_, push, values)] = entries(batch, rows, shared, checked, {route_id("tok"): route})
    assert vars(push) == vars(PushChunk("req-1", "mid", "x", (2,), {}, True, 1, 2, "tok", 5, (9.0,), 3.0))
    assert torch.equal(values.rows, torch.ones(2, 3))


def test_columns_that_disagree_are_refused_naming_the_field():
    builder = BatchBuilder()
    builder.add("a", "r", 0, 0, 0, False, (1.0, 2.0), torch.ones(2, 3))
    [batch] = builder.build(lambda rows, shares: rows)
    with pytest.raises(InvalidArgument, match=r"f: the entries take 2 rows, rows holds 3"):
        layout(batch, 3, "f")
    record = RECORD.unpack(batch.entries)
    with pytest.raises(InvalidArgument, match=r"f.entries\[0\]: num_context 5 > rows 2"):
        layout(PushBatch(RECORD.pack(*record[:3], 5, *record[4:]), batch.produced_us), 2, "f")
    with pytest.raises(InvalidArgument, match=r"f.entries\[0\].flags 5"):
        layout(PushBatch(RECORD.pack(*record[:5], END_OF_STREAM | 4), batch.produced_us), 2, "f")
    with pytest.raises(InvalidArgument, match="produced_us has 1 times for 2 new items"):
        layout(PushBatch(batch.entries, batch.produced_us[:8]), 2, "f")
    with pytest.raises(InvalidArgument, match="f.entries: 31 bytes is not a whole number"):
        layout(PushBatch(batch.entries[:-1], batch.produced_us), 2, "f")
    assert batch.columns()["rows"].tolist() == [2]  # the same records as numpy columns


def test_a_shared_memory_batch_is_one_lease_each_request_holds_a_share_of():
    producer = Transport(TransportConfig(mode="shm", host_id="h"))
    consumer = Transport(TransportConfig(mode="shm", host_id="h"))
    try:
        builder = BatchBuilder()
        for rid in ("a", "b", "a"):
            builder.add(f"tok-{rid}", rid, 0, 0, 0, False, (1.0,), torch.full((1, 4), float(ord(rid))))
        [batch] = builder.build(lambda rows, shares: producer.export(rows, request_id="a", carrier="peer:x",
                                                                     consumer_host_ids=("h",), shares=shares))
        rows, shared, checked = resolve_rows(consumer, batch, "b")
        shares = [values.share for _, _, values in entries(batch, rows, shared, checked, {})]
        assert {s.consumed.lease_id for s in shares} == {batch.rows.lease_id} and producer.stats()["num_leases"] == 1
        producer.release([batch.rows.lease_id], request_id="stranger")  # a foreign release is refused
        producer.release([batch.rows.lease_id], request_id="b")
        producer.release([batch.rows.lease_id], request_id="a")
        assert producer.stats()["num_leases"] == 1  # "a" holds two shares
        producer.release_request("a")  # its end drops what it still owed
        assert producer.stats()["num_leases"] == 0
        for share in shares:
            share.close()
        producer.arena.check_integrity()
    finally:
        producer.close()
        consumer.close()


@pytest.fixture(scope="module")
def server():
    toy = make_b()
    toy.fail_on = "r-bad"
    s = start_in_process(toy)
    yield s
    s.stop()


def _batch(rids: list[str], start: int = 0, last: bool = False) -> PushBatch:
    builder = BatchBuilder()
    for i, rid in enumerate(rids):
        builder.add(f"tok-{rid}", rid, start, 0, 0, last, (1.0,), torch.tensor([float(i + 10)]))
    [batch] = builder.build(lambda rows, shares: inline_ref(rows))
    return batch


def test_an_entry_the_consumer_refuses_fails_its_own_request_alone(server):
    rids = ["r-ok1", "r-bad", "r-ok2"]
    with RunStream(server.address) as conductor, RunStream(server.address) as producer:
        conductor.send(*[grant(rid, token=f"tok-{rid}") for rid in rids])
        producer.send(_batch(rids, last=True))
        outputs, errors, done = {}, {}, set()
        while len(outputs) + len(errors) < 3 or len(done) < 2:
            for ev in conductor.events():
                if isinstance(ev, NodeOutput):
                    y = ev.tensors["y"]
                    outputs[ev.request_id] = float(view(y.location.data, y.dtype, y.shape)[0])
                elif isinstance(ev, NodeError):
                    errors[ev.request_id] = ev.message
                elif isinstance(ev, NodeDone):
                    done.add(ev.request_id)
        assert outputs == {"r-ok1": 10.0, "r-ok2": 12.0} and list(errors) == ["r-bad"]
        assert "fails request r-bad on purpose" in errors["r-bad"] and done == {"r-ok1", "r-ok2"}
        assert any(isinstance(e, RouteCredit) for e in producer.events())
        conductor.send(*[Cancel(rid) for rid in rids])
        assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)


def test_an_entry_on_another_streams_route_is_refused_and_the_rest_go_on(server):
    with RunStream(server.address) as conductor, RunStream(server.address) as producer, \
            RunStream(server.address) as stranger:
        conductor.send(grant("r-mine", token="tok-r-mine"), grant("r-theirs", token="tok-r-theirs"))
        producer.send(_batch(["r-mine"]))
        assert isinstance(conductor.events()[0], NodeOutput)
        stranger.send(_batch(["r-mine", "r-theirs"], start=1))  # r-mine's route is the producer's
        [refused] = stranger.events()
        assert isinstance(refused, NodeError) and refused.status == "PERMISSION_DENIED"
        assert refused.request_id == "r-mine" and "another stream" in refused.message
        [out] = conductor.events()
        assert isinstance(out, NodeOutput) and out.request_id == "r-theirs"
        conductor.send(Cancel("r-mine"), Cancel("r-theirs"))
        assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
    server.hosted.step_loop.routed.inb.check_integrity()


def test_a_batch_entry_before_its_grant_waits_for_it(server):
    with RunStream(server.address) as conductor, RunStream(server.address) as producer:
        producer.send(_batch(["r-early"], last=True))
        conductor.send(grant("r-early", token="tok-r-early"))
        got = []
        while not any(isinstance(e, NodeDone) for e in got):
            got += conductor.events()
        [out] = [e for e in got if isinstance(e, NodeOutput)]
        assert out.request_id == "r-early" and out.iteration == (0,)
        conductor.send(Cancel("r-early"))
        assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)


def _lying_batch(request_id: str, num_rows: int) -> PushBatch:
    """A one-entry batch whose entry claims num_rows rows while its rows hold 1."""
    good = _batch([request_id])
    record = RECORD.unpack(good.entries)
    return PushBatch(RECORD.pack(record[0], record[1], num_rows, *record[3:]), good.produced_us, good.rows)


def _failed_on_both_sides(server, conductor, producer, request_id: str, num_rows: int) -> None:
    [to_producer] = producer.events()
    [to_conductor] = conductor.events()
    for ev in (to_producer, to_conductor):
        assert isinstance(ev, NodeError) and ev.request_id == request_id and ev.status == "INVALID_ARGUMENT"
        assert f"items[0].batch: the entries take {num_rows} rows, rows holds 1" in ev.message
    conductor.send(Cancel(request_id))
    assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)


def test_a_batch_whose_columns_disagree_fails_the_requests_it_names_on_both_sides(server):
    with RunStream(server.address) as conductor, RunStream(server.address) as producer:
        conductor.send(grant("r-bad-batch", token="tok-r-bad-batch"))
        producer.send(_lying_batch("r-bad-batch", 2))
        _failed_on_both_sides(server, conductor, producer, "r-bad-batch", 2)


def test_a_batch_refused_before_its_grant_fails_the_request_when_the_grant_comes(server):
    """The grant and the batch travel on different streams: a batch refused whole may name
    a route not granted yet, and that request fails at its grant, not never."""
    with RunStream(server.address) as conductor, RunStream(server.address) as producer:
        producer.send(_lying_batch("r-bad-early", 3))
        assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)  # sent first: read first, in practice
        conductor.send(grant("r-bad-early", token="tok-r-bad-early"))
        _failed_on_both_sides(server, conductor, producer, "r-bad-early", 3)


def test_an_end_without_rows_travels_after_its_own_routes_rows():
    """Batches of one step are applied in turn: a route's end marker in another batch than
    its last rows would end the stream before them."""
    builder = BatchBuilder()
    builder.add("q", "rq", 0, 0, 0, False, (1.0,), torch.ones(1, 2))  # float32: the first batch
    builder.add("r", "rr", 0, 0, 0, False, (1.0,), torch.ones(1, 3, dtype=torch.int64))  # int64: the second
    builder.add("r", "rr", 1, 0, 0, True, (), None)
    builder.add("s", "rs", 0, 0, 0, True, (), None)  # no rows this step: any batch
    first, second = builder.build(lambda rows, shares: inline_ref(rows))
    assert [r[0] for r in RECORD.iter_unpack(first.entries)] == [route_id("q"), route_id("s")]
    assert [(r[0], r[5]) for r in RECORD.iter_unpack(second.entries)] == [(route_id("r"), 0),
                                                                           (route_id("r"), END_OF_STREAM)]
