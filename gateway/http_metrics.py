"""An ASGI middleware around every route: counts requests by route and status and times
them (to the first body byte and to the end). Plain ASGI, so streamed responses stay
streamed. A request that ends without a response is counted as 499 (its client left)
unless it raised (500)."""
from __future__ import annotations

import time

from gateway.metrics import GatewayMetrics

ROUTES = ("/v1/audio/speech", "/v1/chat/completions", "/v1/images/generations", "/v1/models", "/health",
          "/metrics")
CLIENT_CLOSED = 499  # nginx's status for a request whose client left before its answer


def route_of(path: str) -> str:
    if path.startswith("/v1/models/"):
        return "/v1/models"
    return path if path in ROUTES else "other"


class HttpMetrics:
    def __init__(self, app, metrics: GatewayMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route, t0, status = route_of(scope["path"]), time.perf_counter(), [500]
        started = [False, False]  # the response's start, its first body byte

        async def timed_send(message) -> None:
            if message["type"] == "http.response.start":
                status[0], started[0] = message["status"], True
            elif message["type"] == "http.response.body" and not started[1] and message.get("body"):
                started[1] = True
                self.metrics.first_byte.labels(route).observe(time.perf_counter() - t0)
            await send(message)

        gauge = self.metrics.in_flight.labels(route)
        gauge.inc()
        try:
            await self.app(scope, receive, timed_send)
            if not started[0]:
                status[0] = CLIENT_CLOSED
        finally:
            gauge.dec()
            self.metrics.requests.labels(route, str(status[0])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)
