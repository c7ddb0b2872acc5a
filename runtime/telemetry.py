"""OpenTelemetry for one process.

One `Telemetry` per hosted service: a TracerProvider whose Resource carries
`service.name`, an OTLP gRPC exporter when OTEL_EXPORTER_OTLP_ENDPOINT is set, another
to `starmesh up`'s local trace store when STARMESH_TRACE_STORE is set (spans go to
both), nothing at all when OTEL_SDK_DISABLED=true. Tests pass extra span
processors (an InMemorySpanExporter) and may host several services in one
process, so nothing here touches the global provider unless asked to
(`install_global`, used by `starmesh serve`).

Unary and per-request RPCs are traced by opentelemetry-instrumentation-grpc.
The multiplexed `Run` stream is excluded: it lives as long as a connection and
would be one endless span; its items carry each request's W3C trace context
instead (`inject_context` / `extract_context`), and the step loop opens a
`node <name>` span per OpenNode under it.
"""
from __future__ import annotations

import logging
import os
from typing import Iterable, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

TRACER_NAME = "starmesh.services"
_PROPAGATOR = TraceContextTextMapPropagator()


_UNTRACED_SERVICES = ("/grpc.health.", "/grpc.reflection.")


def is_traced_rpc(details) -> bool:
    """False for calls that must not become spans: the endless Run stream, health probes
    and reflection (infrastructure: a compose health check every few seconds is noise).
    `details`: the call details an interceptor sees (their `method`, "/service/Method",
    is bytes on some grpc.aio client paths). Checked once per call on every server and
    channel, so a plain string test (the instrumentation's own filters cost tens of
    microseconds a call)."""
    method = getattr(details, "method", "") or ""
    if isinstance(method, bytes):
        method = method.decode(errors="replace")
    return not (method.endswith("/Run") or method.startswith(_UNTRACED_SERVICES))


TRACE_STORE_ENV = "STARMESH_TRACE_STORE"  # host:port of the local OTLP trace store


def is_sdk_disabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


class Telemetry:
    """Tracer provider, tracer and gRPC interceptors of one hosted service."""

    def __init__(
        self,
        service_name: str,
        *,
        span_processors: Iterable[SpanProcessor] = (),
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.service_name = service_name
        self.is_enabled = not is_sdk_disabled(env)
        self._owned: list[SpanProcessor] = []  # processors we shut down; callers own theirs
        if not self.is_enabled:
            self.tracer_provider: trace.TracerProvider = trace.NoOpTracerProvider()
        else:
            resource = Resource.create({"service.name": service_name})
            # shutdown_on_exit=False: shutdown() is explicit, and an atexit hook would shut
            # down processors a test shares between several in-process services.
            provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
                self._owned.append(BatchSpanProcessor(OTLPSpanExporter()))
            if env.get(TRACE_STORE_ENV):  # `starmesh up`'s local trace store, besides any collector
                store = OTLPSpanExporter(endpoint=env[TRACE_STORE_ENV], insecure=True)
                self._owned.append(BatchSpanProcessor(store, schedule_delay_millis=200))
            for proc in [*self._owned, *span_processors]:
                provider.add_span_processor(proc)
            self.tracer_provider = provider
        self.tracer = self.tracer_provider.get_tracer(TRACER_NAME)

    def server_interceptors(self) -> list:
        if not self.is_enabled:
            return []
        return [aio_server_interceptor(self.tracer_provider, filter_=is_traced_rpc)]

    def client_interceptors(self) -> list:
        """For grpc.aio channels this service opens (a Run stream stays untraced)."""
        if not self.is_enabled:
            return []
        return aio_client_interceptors(self.tracer_provider, filter_=is_traced_rpc)

    def install_global(self) -> None:
        """Makes this provider the process's global one (one service per process)."""
        if self.is_enabled:
            trace.set_tracer_provider(self.tracer_provider)

    def shutdown(self) -> None:
        """Flushes every processor; shuts down only the ones this object created."""
        if not self.is_enabled:
            return
        try:
            self.tracer_provider.force_flush(timeout_millis=2000)
        except Exception:  # an unreachable collector must not fail shutdown
            log.warning("flushing spans failed", exc_info=True)
        for proc in self._owned:
            proc.shutdown()


def inject_context(ctx: otel_context.Context | None = None) -> tuple[str, str]:
    """The (traceparent, tracestate) of `ctx` (default: the current context)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


def extract_context(traceparent: str, tracestate: str = "") -> otel_context.Context:
    """A Context whose parent span is the remote one named by `traceparent`.

    An empty or malformed traceparent gives a Context without a parent (a new trace).
    """
    carrier = {}
    if traceparent:
        carrier["traceparent"] = traceparent
        if tracestate:
            carrier["tracestate"] = tracestate
    return _PROPAGATOR.extract(carrier)
