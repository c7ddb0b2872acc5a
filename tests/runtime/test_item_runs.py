"""A per-item routed edge into a node its component maps item by item (`item_nodes`) is
fed as one run per route: the same outputs, at the same iterations, as one chunk run per
item, one component open and one span per request instead of one per item; its producer
is credited as items are answered; client credits park the run; a cancelled or failed
request leaves nothing behind and does not touch the others."""
import asyncio
import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.conductor_toys import PIPELINE_INNER_LOOPS, make_a, make_b, make_c, pipeline_graph
from bench.toys import Toy
from conductor.executor_setup import remote_executor
from conductor.placement import Placement
from runtime.items import AcceptRoute, Cancel, Credit, NodeDone, NodeError, NodeOutput, OpenNode, RouteCredit
from tests.fixtures.routes import TOKEN, push
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from transport.codec import view

pytestmark = pytest.mark.timeout(120)


def _meshes():
    made = {}
    for item_runs in (True, False):
        made[item_runs] = {"a": start_in_process(make_a()), "b": start_in_process(make_b(item_runs)),
                           "c": start_in_process(make_c(item_runs))}
    return made


@pytest.fixture(scope="module")
def meshes():
    made = _meshes()
    yield made
    for services in made.values():
        for server in services.values():
            server.stop()


def _run(services, rids_n: dict[str, int]) -> dict[str, list]:
    placement = Placement.from_dict({"services": {k: {"replicas": [s.address]} for k, s in services.items()},
                                     "placement": {"src": "a", "mid": "b", "sink": "c"}})
    graph = pipeline_graph(max(rids_n.values()))

    async def one(ex, rid: str, n: int) -> list:
        params = {"n": (torch.tensor([float(-n)]),)}  # src counts up from -n: each request its own values
        async with contextlib.aclosing(ex.generate(rid, params)) as outputs:
            return [(name, float(view(ref.location.data, ref.dtype, ref.shape)[0])) async for name, ref in outputs]

    async def main() -> dict:
        async with remote_executor(graph, placement, PIPELINE_INNER_LOOPS) as ex:
            got = await asyncio.gather(*(one(ex, rid, n) for rid, n in rids_n.items()))
        return dict(zip(rids_n, got))

    return asyncio.run(main())


def _opened(services) -> dict[str, int]:
    return {k: services[k].hosted.step_loop.component.num_opened for k in ("b", "c")}


def _settled(services) -> None:
    for k in ("b", "c"):
        assert wait_until(lambda: describe(services[k].address).num_open_requests == 0, 10)
        loop = services[k].hosted.step_loop
        loop.routed.inb.check_integrity()
        assert not loop.component._loops


_counter = iter(range(1 << 30))


@settings(max_examples=6, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=4))
def test_item_runs_answer_what_chunk_runs_answer_with_one_run_per_request(meshes, sizes):
    rids_n = {f"r{next(_counter)}": n for n in sizes}
    before = {form: _opened(services) for form, services in meshes.items()}
    got = {form: _run(services, rids_n) for form, services in meshes.items()}
    assert got[True] == got[False]  # the same values, in order
    for rid in rids_n:  # every request streams the graph's max(sizes) items
        assert len(got[True][rid]) == max(sizes)
    opened = {form: {k: v - before[form][k] for k, v in _opened(services).items()}
              for form, services in meshes.items()}
    assert opened[True] == {"b": len(sizes), "c": len(sizes)}  # one run per request and node
    assert opened[False] == {"b": len(sizes) * max(sizes), "c": len(sizes) * max(sizes)}  # one run per item
    for services in meshes.values():
        _settled(services)


def _grant(rid: str, window: int, credits: dict | None = None) -> AcceptRoute:
    run = OpenNode(rid, "mid", "stream", credits=credits or {}, client_ports=("y",) if credits else ())
    return AcceptRoute(TOKEN, run, "x", edge="src.x -> mid.x", window=window, per_item=True)


def _held(server, token: str) -> int | None:
    """The route's pushes held for client credit (None: not granted yet)."""
    route = server.hosted.step_loop.routed.inb.routes.get(token)
    return len(route.waiting) if route is not None and route.item_run else None


def _values(outputs) -> list[float]:
    return [float(view(o.tensors["y"].location.data, o.tensors["y"].dtype, o.tensors["y"].shape)[0])
            for o in outputs]


def _collect(stream: RunStream, until) -> list:
    """Events of the stream until `until(events so far)` holds (a hung test fails on recv)."""
    got = []
    while not until(got):
        got += stream.events()
    return got


def _of(kind, events) -> list:
    return [e for e in events if isinstance(e, kind)]


def test_client_credits_park_the_run_and_the_producer_is_credited_per_answer():
    server = start_in_process(make_b())
    try:
        with RunStream(server.address) as conductor, RunStream(server.address) as producer:
            conductor.send(_grant("r1", window=8, credits={"y": 2}))
            producer.send(*[push("r1", float(k), k) for k in range(6)])
            # the component is handed 2 (its credit), answers them and is parked; 4 wait, uncredited
            outputs = _of(NodeOutput, _collect(conductor, lambda got: len(_of(NodeOutput, got)) >= 2))
            producer.send(push("r1", 6.0, 6))
            toy, route = server.hosted.step_loop.component, server.hosted.step_loop.routed.inb.routes[TOKEN]
            assert wait_until(lambda: _held(server, TOKEN) == 5 and ("r1", "mid", ()) in toy.parked, 10)
            assert len(outputs) == 2 and route.num_pending == 0 and not toy._loops[("r1", "mid", ())].queue
            conductor.send(Credit("r1", "mid", "y", 10))  # the client reads on: the rest goes
            producer.send(push("r1", 7.0, 7, last=True))
            rest = _collect(conductor, lambda got: _of(NodeDone, got))
            outputs += _of(NodeOutput, rest)
            assert _values(outputs) == [float(k) for k in range(8)]
            assert [o.iteration for o in outputs] == [(k,) for k in range(8)]
            done = _of(NodeDone, rest)[0]
            assert done.iteration == () and done.metadata["edge"]["starmesh.items"] == 8
            credited = _of(RouteCredit, _collect(producer, lambda got: sum(c.amount for c in _of(RouteCredit, got)) >= 8))
            assert sum(c.amount for c in credited) == 8  # every item, once
            conductor.send(Cancel("r1"))
            assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
        server.hosted.step_loop.routed.inb.check_integrity()
    finally:
        server.stop()


def test_a_cancelled_item_run_leaves_nothing_and_the_other_request_goes_on():
    server = start_in_process(make_b())
    other = "e" * 32
    try:
        with RunStream(server.address) as conductor, RunStream(server.address) as producer:
            conductor.send(_grant("r1", window=8, credits={"y": 1}),
                           AcceptRoute(other, OpenNode("r2", "mid", "stream"), "x", window=8, per_item=True))
            producer.send(push("r1", 0.0, 0))
            _collect(conductor, lambda got: _of(NodeOutput, got))  # r1 answered, its credit spent: parked
            producer.send(*[push("r1", float(k), k) for k in range(1, 4)])
            assert wait_until(lambda: _held(server, TOKEN) == 3, 10)  # held for client credit
            conductor.send(Cancel("r1"))
            producer.send(*[push("r2", float(k), k, token=other) for k in range(3)],
                          push("r2", 3.0, 3, last=True, token=other))
            done = _of(NodeDone, _collect(conductor, lambda got: any(e.request_id == "r2" for e in _of(NodeDone, got))))
            assert [e.request_id for e in done] == ["r2"]
            conductor.send(Cancel("r2"))
            assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
        loop = server.hosted.step_loop
        loop.routed.inb.check_integrity()
        assert not loop.component._loops and not loop.routed.inb.routes
    finally:
        server.stop()


def test_an_item_run_that_fails_to_open_fails_its_request_alone_and_owes_nothing():
    toy = Toy("bench_b", {"mid": lambda i, p: {"y": i["x"]}}, fail_on="doomed", item_nodes=("mid",))
    server = start_in_process(toy)
    try:
        with RunStream(server.address) as conductor, RunStream(server.address) as producer:
            conductor.send(_grant("doomed", window=4))
            error = _of(NodeError, _collect(conductor, lambda got: _of(NodeError, got)))[0]
            assert error.request_id == "doomed" and "on purpose" in error.message
            producer.send(*[push("doomed", float(k), k) for k in range(3)], push("doomed", 3.0, 3, last=True))
            credited = _of(RouteCredit, _collect(producer, lambda got: sum(c.amount for c in _of(RouteCredit, got)) >= 4))
            assert sum(c.amount for c in credited) == 4  # nothing it pushed stays owed
            conductor.send(Cancel("doomed"))
            assert wait_until(lambda: describe(server.address).num_open_requests == 0, 10)
        server.hosted.step_loop.routed.inb.check_integrity()
    finally:
        server.stop()


@pytest.mark.parametrize("item_runs", [True, False])
def test_inputs_in_shared_memory_are_freed_as_items_are_answered(item_runs):
    """The producer's leases are acknowledged item by item (an item run's as each item is
    answered, a chunk run's at its end), not held to the stream's end."""
    from transport.config import TransportConfig

    shm = TransportConfig(host_id="test-host", mode="shm")
    services = {"a": start_in_process(make_a(), transport_config=shm),
                "b": start_in_process(make_b(item_runs), transport_config=shm),
                "c": start_in_process(make_c(item_runs), transport_config=shm)}
    arena = services["a"].hosted.step_loop.transport.arena
    placement = Placement.from_dict({"services": {k: {"replicas": [s.address]} for k, s in services.items()},
                                     "placement": {"src": "a", "mid": "b", "sink": "c"}})

    async def main() -> tuple[int, int]:
        async with remote_executor(pipeline_graph(100000), placement, PIPELINE_INNER_LOOPS) as ex:
            got = 0
            async with contextlib.aclosing(ex.generate("long", {"n": (torch.tensor([0.0]),)},
                                                       {"interval_s": 0.001})) as outputs:
                async for _ in outputs:
                    got += 1
                    if got == 300:
                        return got, arena.num_leases  # the stream goes on: nothing has ended

    try:
        got, leases = asyncio.run(main())
        assert got == 300 and leases < 100  # held to the end, 300 items would hold 300 leases
        _settled(services)
        # the executor's streams closed mid-stream, with no Cancel: the producer frees
        # what it had sent on the peer link as it drops the request
        assert wait_until(lambda: arena.num_leases == 0, 10), arena.num_leases
    finally:
        for server in services.values():
            server.stop()
