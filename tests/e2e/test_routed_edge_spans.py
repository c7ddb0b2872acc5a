"""Tracing of routed per-item edges: the consumer's chunk runs of one request share one
`node <name>` span (carrying how many ran) in the request's trace, beside the edge's
aggregated span (with the consumer's share of the latency); a cancelled request ends that
span too, marked with the reason."""
import asyncio
import contextlib

import pytest
import torch
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from bench.conductor_toys import PIPELINE_INNER_LOOPS, make_a, make_b, make_c, pipeline_graph
from conductor.executor_setup import remote_executor
from conductor.placement import Placement
from runtime.telemetry import Telemetry
from tests.fixtures.services import start_in_process, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def traced():
    exporter = InMemorySpanExporter()

    def telemetry(name: str) -> Telemetry:
        return Telemetry(name, span_processors=[SimpleSpanProcessor(exporter)], environ={})

    # the consumers run a chunk run per item (their item runs have one span each, as any run)
    services = {k: start_in_process(make(), telemetry(f"svc-{k}"))
                for k, make in {"a": make_a, "b": lambda: make_b(item_runs=False),
                                "c": lambda: make_c(item_runs=False)}.items()}
    yield exporter, telemetry("conductor"), services
    for server in services.values():
        server.stop()


def _placement(services) -> Placement:
    return Placement.from_dict({"services": {k: {"replicas": [s.address]} for k, s in services.items()},
                                "placement": {"src": "a", "mid": "b", "sink": "c"}})


def _mine(exporter, rid: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.attributes.get("starmesh.request_id") == rid]


@pytest.mark.parametrize("n", [7, 40])
def test_a_per_item_routes_chunk_runs_are_one_span_per_request(traced, n):
    exporter, conductor, services = traced
    rid = f"spans-{n}"

    async def main() -> int:
        async with remote_executor(pipeline_graph(n), _placement(services), PIPELINE_INNER_LOOPS,
                                   conductor.tracer) as ex:
            return len([v async for v in ex.generate(rid, {"n": (torch.tensor([0.0]),)})])

    assert asyncio.run(main()) == n
    assert wait_until(lambda: {"node mid", "node sink", "request"} <= {s.name for s in _mine(exporter, rid)})
    spans = _mine(exporter, rid)
    walk = next(s for s in spans if s.name == "walk stream")
    for name in ("node mid", "node sink"):
        (span,) = [s for s in spans if s.name == name]  # one, however many items
        assert span.attributes["starmesh.num_runs"] == n
        assert span.parent.span_id == walk.context.span_id and span.context.trace_id == walk.context.trace_id
        assert span.status.status_code != StatusCode.ERROR
    for edge in ("edge src.x -> mid.x", "edge mid.y -> sink.y"):
        (span,) = [s for s in spans if s.name == edge]
        a = span.attributes
        assert a["starmesh.items"] == n
        # the consumer's share (arrival -> dispatch) is part of the edge's latency
        for q in ("p50", "p90", "p99"):
            assert 0 <= a[f"starmesh.consumer_wait_us.{q}"] <= a["starmesh.latency_us.max"]
        assert a["starmesh.consumer_wait_us.p50"] <= a["starmesh.consumer_wait_us.p99"]


def test_a_cancelled_request_ends_its_shared_spans(traced):
    exporter, conductor, services = traced
    rid = "spans-cancelled"

    async def main() -> None:
        async with remote_executor(pipeline_graph(100000), _placement(services), PIPELINE_INNER_LOOPS,
                                   conductor.tracer) as ex:
            async with contextlib.aclosing(ex.generate(rid, {"n": (torch.tensor([0.0]),)})) as outputs:
                got = 0
                async for _ in outputs:
                    got += 1
                    if got == 5:
                        break  # closing the generator cancels the request everywhere

    asyncio.run(main())
    assert wait_until(lambda: {"node mid", "node sink"} <= {s.name for s in _mine(exporter, rid)})
    for name in ("node mid", "node sink"):
        (span,) = [s for s in _mine(exporter, rid) if s.name == name]
        assert span.status.status_code == StatusCode.ERROR and span.status.description == "cancelled"
        assert span.attributes["starmesh.num_runs"] >= 1
