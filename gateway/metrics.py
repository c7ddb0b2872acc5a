"""The gateway's Prometheus metrics (GET /metrics): requests by route and HTTP status,
their latency and time to first byte, requests in flight, client disconnects, the bytes
of request bodies held, open Realtime connections and how they ended, and the standard
process_* and python_* collectors."""
from __future__ import annotations

from prometheus_client import (CollectorRegistry, Counter, Gauge, GCCollector, Histogram, PlatformCollector,
                               ProcessCollector, generate_latest)
from prometheus_client import CONTENT_TYPE_LATEST  # noqa: F401  (the /metrics media type)

BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        r = self.registry
        self.requests = Counter("starmesh_gateway_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=r)
        self.latency = Histogram("starmesh_gateway_request_seconds", "request received -> response complete",
                                 ["route"], buckets=BUCKETS_S, registry=r)
        self.first_byte = Histogram("starmesh_gateway_first_byte_seconds",
                                    "request received -> first body byte (streamed responses)", ["route"],
                                    buckets=BUCKETS_S, registry=r)
        self.in_flight = Gauge("starmesh_gateway_requests_in_flight", "requests being answered", ["route"],
                               registry=r)
        self.disconnects = Counter("starmesh_gateway_client_disconnects",
                                   "requests whose client left before the end (cancelled in the mesh)", ["route"],
                                   registry=r)
        self.body_bytes = Gauge("starmesh_gateway_body_bytes_in_flight",
                                "bytes of request bodies held, across all connections (capped: 429 past the cap)",
                                registry=r)
        self.realtime_sessions = Gauge("starmesh_gateway_realtime_sessions", "open /v1/realtime connections",
                                       registry=r)
        self.realtime_closes = Counter("starmesh_gateway_realtime_closes",
                                       "/v1/realtime connections ended, by how (client_closed, conductor_ended, "
                                       "client_not_reading, or the error code that ended it)", ["outcome"],
                                       registry=r)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
