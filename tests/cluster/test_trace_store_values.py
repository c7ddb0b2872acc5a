"""The local trace store keeps span attributes as JSON values: arrays as lists (through
the OpenTelemetry SDK's own OTLP exporter), kvlists as dicts, bytes as base64, every one
bounded."""
from __future__ import annotations

import time

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from cluster.otlp_value import MAX_DEPTH, MAX_ITEMS
from cluster.trace_store import REQUEST_ATTR, TraceStore

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store():
    store = TraceStore().start()
    yield store
    store.stop()


def _wait_for_request(store: TraceStore, request_id: str) -> list[dict]:
    deadline = time.monotonic() + 30  # only a hung export fails
    while not (spans := store.request(request_id)["spans"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return spans


def test_the_sdks_array_attributes_arrive_as_lists(store):
    provider = TracerProvider(resource=Resource.create({"service.name": "probe"}))
    exporter = OTLPSpanExporter(endpoint=store.otlp_address, insecure=True)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("walk") as span:
        span.set_attributes({REQUEST_ATTR: "r-arrays", "starmesh.nodes": ["prefill", "decode"],
                             "starmesh.shape": [1, 24000], "starmesh.flags": [True, False],
                             "starmesh.weights": [0.5, 1.5]})
    provider.shutdown()
    [span] = _wait_for_request(store, "r-arrays")
    a = span["attributes"]
    assert span["service"] == "probe"
    assert a["starmesh.nodes"] == ["prefill", "decode"]
    assert a["starmesh.shape"] == [1, 24000]
    assert a["starmesh.flags"] == [True, False]
    assert a["starmesh.weights"] == [0.5, 1.5]


def _any(value) -> AnyValue:
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=_any(v)) for k, v in value.items()]))
    return AnyValue(array_value=ArrayValue(values=[_any(v) for v in value]))


def _nested(depth: int):
    return [1] if depth == 0 else [_nested(depth - 1)]


def test_kvlists_bytes_and_bounds(store):
    attributes = {REQUEST_ATTR: "r-kv", "kv": {"voice": "ethan", "frames": 30}, "raw": b"\x00\xffab",
                  "long": list(range(MAX_ITEMS + 10)), "deep": _nested(MAX_DEPTH + 2)}
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="probe",
                attributes=[KeyValue(key=k, value=_any(v)) for k, v in attributes.items()] + [KeyValue(key="unset")])
    request = trace_service_pb2.ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[
        ScopeSpans(spans=[span])])])
    with grpc.insecure_channel(store.otlp_address) as channel:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=30)
    [kept] = store.request("r-kv")["spans"]
    a = kept["attributes"]
    assert a["kv"] == {"voice": "ethan", "frames": 30}
    assert a["raw"] == "AP9hYg=="  # base64 of the four bytes
    assert a["long"] == list(range(MAX_ITEMS))
    assert a["unset"] is None
    value, depth = a["deep"], 0
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    assert value is None and depth == MAX_DEPTH + 1  # lists on levels 0..MAX_DEPTH, then None
