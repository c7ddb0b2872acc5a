"""Trace propagation: client -> service A (relay) -> service B (echo) is one trace.

Both services run in-process on loopback, each with its own TracerProvider
(service.name = component name) feeding one InMemorySpanExporter.
"""
from __future__ import annotations

import asyncio

import grpc
import pytest
import torch
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from protos.starmesh.v1 import component_pb2, component_pb2_grpc
from runtime.items import NodeOutput, OpenNode
from runtime.telemetry import Telemetry, extract_context, inject_context
from tests.fixtures.components import Echo, Relay, inline_ref, inline_tensor
from tests.fixtures.services import RunStream, start_in_process, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def traced():
    exporter = InMemorySpanExporter()

    def telemetry(name: str) -> Telemetry:
        return Telemetry(name, span_processors=[SimpleSpanProcessor(exporter)], environ={})

    b = start_in_process(Echo(), telemetry("echo"))
    a = start_in_process(Relay(b.address), telemetry("relay"))
    client = telemetry("client")
    yield exporter, client, a, b
    a.stop()
    b.stop()


def test_client_relay_echo_is_one_trace(traced):
    exporter, client, a, _b = traced
    exporter.clear()
    with client.tracer.start_as_current_span("client request") as root:
        traceparent, tracestate = inject_context()
    with RunStream(a.address) as stream:
        x = torch.arange(3.0)
        stream.send(OpenNode(request_id="t1", node="relay", inputs={"x": inline_ref(x)}, traceparent=traceparent))
        out, _done = stream.events()
        assert isinstance(out, NodeOutput) and torch.equal(inline_tensor(out.tensors["x"]), x)
    assert wait_until(lambda: {"node relay", "node echo"} <= {s.name for s in exporter.get_finished_spans()})
    spans = {s.name: s for s in exporter.get_finished_spans()}
    relay, echo = spans["node relay"], spans["node echo"]
    trace_id = root.get_span_context().trace_id
    assert {spans["client request"].context.trace_id, relay.context.trace_id, echo.context.trace_id} == {trace_id}
    assert relay.parent.span_id == root.get_span_context().span_id and relay.parent.is_remote
    assert echo.parent.span_id == relay.context.span_id
    assert relay.resource.attributes["service.name"] == "relay"
    assert echo.resource.attributes["service.name"] == "echo"
    assert echo.attributes["starmesh.request_id"] == "t1"
    # The multiplexed Run streams are not instrumented as spans of their own.
    assert not [s for s in exporter.get_finished_spans() if s.name.endswith("/Run")]


def test_unary_describe_server_span_is_a_child_of_the_client_span(traced):
    exporter, client, a, _b = traced
    exporter.clear()

    async def call():
        async with grpc.aio.insecure_channel(a.address, interceptors=client.client_interceptors()) as channel:
            return await component_pb2_grpc.ComponentStub(channel).Describe(component_pb2.DescribeRequest())

    with client.tracer.start_as_current_span("client describe") as root:
        info = asyncio.run(call())
    assert info.name == "relay"
    assert wait_until(lambda: len([s for s in exporter.get_finished_spans() if s.name.endswith("/Describe")]) == 2)
    rpc = {s.kind: s for s in exporter.get_finished_spans() if s.name.endswith("/Describe")}
    client_span, server_span = rpc[SpanKind.CLIENT], rpc[SpanKind.SERVER]
    assert client_span.parent.span_id == root.get_span_context().span_id
    assert server_span.parent.span_id == client_span.context.span_id
    assert server_span.context.trace_id == root.get_span_context().trace_id
    assert server_span.resource.attributes["service.name"] == "relay"


def test_health_and_reflection_calls_are_not_traced_but_describe_is(traced):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    exporter, client, a, _b = traced
    exporter.clear()

    async def calls():
        async with grpc.aio.insecure_channel(a.address, interceptors=client.client_interceptors()) as channel:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            async for _ in stream:
                pass
            await component_pb2_grpc.ComponentStub(channel).Describe(component_pb2.DescribeRequest())

    asyncio.run(calls())
    assert wait_until(lambda: len([s for s in exporter.get_finished_spans() if s.name.endswith("/Describe")]) == 2)
    names = {s.name for s in exporter.get_finished_spans()}
    assert not [n for n in names if "grpc.health" in n or "grpc.reflection" in n], names


def test_is_traced_rpc_reads_str_and_bytes_methods():
    from types import SimpleNamespace

    from runtime.telemetry import is_traced_rpc

    for method, traced in (("/starmesh.v1.Component/Run", False), (b"/starmesh.v1.Component/Run", False),
                           ("/grpc.health.v1.Health/Check", False), (b"/grpc.health.v1.Health/Watch", False),
                           ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", False),
                           ("/starmesh.v1.Conductor/Generate", True), (b"/starmesh.v1.Component/Describe", True),
                           ("/starmesh.v1.Conductor/RunAway", True)):
        assert is_traced_rpc(SimpleNamespace(method=method)) is traced, method
    assert is_traced_rpc(SimpleNamespace()) is True  # no method known: traced (never silently dropped)


def test_node_error_ends_the_node_span_with_error(traced):
    exporter, _client, a, _b = traced
    exporter.clear()
    with RunStream(a.address) as stream:
        stream.send(OpenNode(request_id="t2", node="relay", params={"target": "127.0.0.1:1"}))
        (err, *_rest) = stream.events(timeout_s=30)
        assert err.request_id == "t2" and err.status == "UNAVAILABLE", err
    assert wait_until(lambda: any(s.name == "node relay" for s in exporter.get_finished_spans()))
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "node relay"]
    assert not span.status.is_ok and span.parent is None  # no traceparent: a new trace


def test_sdk_disabled_records_nothing():
    exporter = InMemorySpanExporter()
    telemetry = Telemetry("off", span_processors=[SimpleSpanProcessor(exporter)], environ={"OTEL_SDK_DISABLED": "true"})
    with telemetry.tracer.start_as_current_span("x"):
        pass
    assert exporter.get_finished_spans() == () and telemetry.server_interceptors() == []


def test_context_helpers_round_trip():
    exporter = InMemorySpanExporter()
    telemetry = Telemetry("helpers", span_processors=[SimpleSpanProcessor(exporter)], environ={})
    with telemetry.tracer.start_as_current_span("parent") as parent:
        traceparent, _ = inject_context()
    assert traceparent.startswith("00-")
    with telemetry.tracer.start_as_current_span("child", context=extract_context(traceparent)) as child:
        pass
    assert child.parent.span_id == parent.get_span_context().span_id
    assert inject_context(extract_context("")) == ("", "")
