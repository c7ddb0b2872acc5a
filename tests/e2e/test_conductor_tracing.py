"""One trace per request across conductor and services, even when two requests share
each Run stream; edge spans carry counts, bytes and latency."""
import asyncio

import grpc
import pytest
import torch
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conductor.model import ServedModel
from conductor.placement import Placement
from conductor.service import ConductorService
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.background import BackgroundServer
from runtime.telemetry import Telemetry
from bench import toys
from tests.e2e.test_conductor_mesh import request
from tests.fixtures.services import start_in_process, wait_until

pytestmark = pytest.mark.timeout(60)


def test_two_requests_on_shared_streams_are_two_traces():
    exporter = InMemorySpanExporter()

    def telemetry(name):
        return Telemetry(name, span_processors=[SimpleSpanProcessor(exporter)], environ={})

    services = {name: start_in_process(make(), telemetry(name)) for name, make in
                [("svc_embed", toys.make_embed), ("svc_lm", toys.make_lm), ("svc_codec", toys.make_codec)]}
    placement = Placement.from_dict({
        "services": {name: {"replicas": [s.address]} for name, s in services.items()},
        "placement": {"embed": "svc_embed", "lm": "svc_lm", "codec": "svc_codec"}})
    conductor_tel = telemetry("conductor")
    conductor = BackgroundServer(ConductorService([ServedModel("toy", toys.toy_pipeline(), placement, {"gen"})],
                                                  conductor_tel), telemetry=conductor_tel)
    conductor.start()
    client = telemetry("client")
    try:
        async def main():
            async with grpc.aio.insecure_channel(conductor.address, interceptors=client.client_interceptors()) as ch:
                stub = conductor_pb2_grpc.ConductorStub(ch)

                async def one(rid, x):
                    with client.tracer.start_as_current_span(f"client {rid}") as span:
                        [ev async for ev in stub.Generate(request(x, rid))]
                        return span.get_span_context().trace_id

                return await asyncio.gather(one("t1", 1.0), one("t2", 2.0))

        trace_ids = dict(zip(["t1", "t2"], asyncio.run(main())))
    finally:
        conductor.stop()
        for s in services.values():
            s.stop()
    assert trace_ids["t1"] != trace_ids["t2"]
    assert wait_until(lambda: sum(s.name == "request" for s in exporter.get_finished_spans()) == 2)
    spans = exporter.get_finished_spans()
    for rid, trace_id in trace_ids.items():
        check_request_trace(spans, rid, trace_id)


def check_request_trace(spans, rid: str, trace_id: int) -> None:
    """One request's spans: request <- walk <- nodes, edges, and the client's chain."""
    by_id = {s.context.span_id: s for s in spans}
    mine = [s for s in spans if s.context.trace_id == trace_id]
    names = {s.name for s in mine}
    assert {"request", "walk speak", "node embed", "node lm", "node codec"} <= names, names
    assert {"edge embed.e -> lm.n", "edge lm.frame -> codec.frames"} <= names, names
    walk = next(s for s in mine if s.name == "walk speak")
    request_span = next(s for s in mine if s.name == "request")
    assert walk.parent.span_id == request_span.context.span_id
    assert request_span.attributes["starmesh.request_id"] == rid
    for node in ("node embed", "node lm", "node codec"):
        for s in (s for s in mine if s.name == node):
            assert s.parent.span_id == walk.context.span_id  # through the Run item's traceparent
            assert s.attributes["starmesh.request_id"] == rid
    # request <- Generate server span <- client RPC span <- the client's own span
    chain, span = [], request_span
    while span.parent is not None:
        span = by_id[span.parent.span_id]
        chain.append(span.name)
    assert chain == ["/starmesh.v1.Conductor/Generate"] * 2 + [f"client {rid}"], chain
    hop = next(s for s in mine if s.name == "edge embed.e -> lm.n")
    assert hop.attributes["starmesh.items"] == 1 and hop.attributes["starmesh.transport"] == "inline"
    chunks = [s for s in mine if s.name == "edge lm.frame -> codec.frames"]
    assert len(chunks) >= 2 and all(s.attributes["starmesh.latency_us"] >= 0 for s in chunks)
    # routed to another process: each chunk's span also says how long it waited in the consumer
    assert all(0 <= s.attributes["starmesh.consumer_wait_us"] <= s.attributes["starmesh.latency_us"] for s in chunks)
