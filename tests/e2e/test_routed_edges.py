"""Routed streaming edges through real services: items go producer -> consumer replica
directly, the conductor hears lifecycle events only, windows bound the producer, a
dead consumer fails exactly its requests, and nothing leaks on the survivors."""
import asyncio
import contextlib
import threading

import pytest
import torch

from bench.conductor_toys import PIPELINE_INNER_LOOPS, make_a, make_b, make_c, pipeline_graph
from bench.toys import Toy
from conductor.executor_setup import remote_executor
from conductor.placement import Placement
from runtime.items import Alive, NodeOutput
from runtime.received_rows import ReceivedRows
from tests.fixtures.services import describe, start_in_process, wait_until
from transport.codec import view

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def services():
    started = {"a": start_in_process(make_a()), "b": start_in_process(make_b()), "c": start_in_process(make_c())}
    yield started
    for server in started.values():
        server.stop()


def placement(services, sink="c") -> Placement:
    return Placement.from_dict({"services": {k: {"replicas": [s.address]} for k, s in services.items()},
                                "placement": {"src": "a", "mid": "b", "sink": sink}})


def number(value) -> float:
    ref = value[0] if isinstance(value, tuple) else value
    return float(view(ref.location.data, ref.dtype, ref.shape)[0])  # inline references


async def drain(ex, rid: str) -> list[float]:
    async with contextlib.aclosing(ex.generate(rid, {"n": (torch.tensor([0.0]),)})) as outputs:
        return [number(value) async for _, value in outputs]


class Counter:
    """Counts the messages on the conductor's Run streams that are not bound for the
    client: everything sent except client-room credits, everything received except
    batches that carry client outputs."""

    def __init__(self, ex, nodes) -> None:
        self.control = 0
        targets = {ex.hooks.route(n, "stream", "count").name: ex.hooks.route(n, "stream", "count") for n in nodes}
        for target in targets.values():
            self._wrap(target)

    def _wrap(self, target) -> None:
        post, sink = target.post, target.sink

        def counting_post(items):
            if not all(type(i).__name__ == "Credit" for i in items):
                self.control += 1
            post(items)

        def counting_sink(events, t):
            # heartbeats (Alive) come per stream per interval, whatever the requests: not counted
            if events and not any(isinstance(e, (NodeOutput, ReceivedRows, Alive)) for e in events):
                self.control += 1
            sink(events, t)

        target.post, target.sink = counting_post, counting_sink


def test_conductor_messages_do_not_grow_with_the_items(services):
    counts = {}
    for n in (100, 400):
        async def main():
            async with remote_executor(pipeline_graph(n), placement(services), PIPELINE_INNER_LOOPS) as ex:
                counter = Counter(ex, ("src", "mid", "sink"))
                got = await drain(ex, f"count-{n}")
                return got, counter.control, dict(ex.num_dispatched)

        got, counts[n], dispatched = asyncio.run(main())
        assert got == [float(i) for i in range(1, n + 1)]  # the client still receives every item
        assert dispatched == {"src": 1}  # mid and sink runs are opened by their replicas
    # O(nodes + walks): opens, grants, markers, cancels. How the services batch their
    # lifecycle events (a NodeDone with an output or on its own) depends on timing, so
    # the counts may differ by a few; per item they would differ by hundreds.
    assert abs(counts[100] - counts[400]) <= 4, counts
    assert max(counts.values()) <= 12, counts
    for name in "abc":
        assert wait_until(lambda: describe(services[name].address).num_open_requests == 0, 30)


def test_routed_consumers_open_their_own_runs_and_report_the_edge(services):
    async def main():
        seen = []
        async with remote_executor(pipeline_graph(20), placement(services), PIPELINE_INNER_LOOPS,
                                   on_edge=lambda edge, s: seen.append((edge, s))) as ex:
            return await drain(ex, "edges"), seen

    got, seen = asyncio.run(main())
    assert got == [float(i) for i in range(1, 21)]
    assert {edge for edge, _ in seen} == {"input.n -> src.n", "src.x -> mid.x", "mid.y -> sink.y"}
    assert all(seconds >= 0 for _, seconds in seen)


class Gate:
    """A sink whose runs wait until the test opens the gate (a slow consumer)."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def sink(self, inputs, params):
        self.open.wait(60)
        return {"z": inputs["y"]}


def test_a_slow_consumer_stalls_only_its_producers_requests(services):
    gate = Gate()
    slow = start_in_process(Toy("slow_c", {"sink": gate.sink}))
    window = 4
    try:
        graph = pipeline_graph(40)
        for edge in graph.walks[0].edges:
            if edge.is_streaming:
                object.__setattr__(edge, "max_buffered", window)
        both = {**services, "slow": slow}

        async def main():
            async with remote_executor(graph, placement(both, sink="slow"), PIPELINE_INNER_LOOPS) as stalled, \
                    remote_executor(pipeline_graph(40), placement(services), PIPELINE_INNER_LOOPS) as fast:
                waiting = asyncio.ensure_future(drain(stalled, "stalled"))
                others = await asyncio.gather(*(drain(fast, f"fast-{i}") for i in range(3)))
                assert not waiting.done()  # the slow consumer's request is still stalled
                a = services["a"].hosted.step_loop
                assert await asyncio.to_thread(wait_until, lambda: bool(a.component.parked), 30)
                gate.open.set()
                b = services["b"].hosted.step_loop
                return others, await waiting, {**a.routed.out.peak_fill, **b.routed.out.peak_fill}

        others, stalled, peak = asyncio.run(main())
        assert all(o == [float(i) for i in range(1, 41)] for o in others)
        assert stalled == [float(i) for i in range(1, 41)]
        # the producer's buffered + unacknowledged items stay within the window; the chained
        # producer (mid) slows its own input instead, so it holds at most its input's window more
        assert 0 < peak[("src.x -> mid.x", window)] <= window
        assert 0 < peak[("mid.y -> sink.y", window)] <= 2 * window
    finally:
        gate.open.set()
        slow.stop()


def test_a_dead_consumer_fails_exactly_its_requests_and_nothing_leaks(services):
    from runtime.process import ServiceProcess
    from tests.fixtures import registry
    from transport.segment import sweep_stale_segments

    doomed = ServiceProcess("bench.conductor_toys:make_c", name="doomed_c").start()
    registry.register(doomed.address, describe(doomed.address).arena)
    both = {**services, "doomed": doomed}
    paced = {"interval_s": 0.005}

    async def doomed_request(ex, rid: str) -> Exception:
        try:
            async with contextlib.aclosing(ex.generate(rid, {"n": (torch.tensor([0.0]),)}, paced)) as outputs:
                async for _ in outputs:
                    if doomed.proc.poll() is None:
                        doomed.kill()
        except Exception as e:  # noqa: BLE001 - the failure is what the test reads
            return e
        raise AssertionError(f"{rid} finished although its sink died")

    async def main():
        async with remote_executor(pipeline_graph(400), placement(both, sink="doomed"), PIPELINE_INNER_LOOPS) as hit, \
                remote_executor(pipeline_graph(60), placement(services), PIPELINE_INNER_LOOPS) as spared:
            return await asyncio.gather(doomed_request(hit, "hit-0"), doomed_request(hit, "hit-1"),
                                        *(drain(spared, f"spared-{i}") for i in range(3)))

    try:
        hit0, hit1, *spared = asyncio.run(main())
    finally:
        registry.unregister(doomed.address)
        doomed.stop()
        sweep_stale_segments()  # the killed process's arena, as its restart would
    for error in (hit0, hit1):
        assert getattr(error, "status", "") == "UNAVAILABLE" and doomed.address in str(error), error
    assert all(s == [float(i) for i in range(1, 61)] for s in spared)
    for name in "abc":  # the survivors hold nothing of the failed requests
        assert wait_until(lambda: describe(services[name].address).num_open_requests == 0, 30), name
        assert wait_until(lambda: describe(services[name].address).transport.num_leases == 0, 30), name
