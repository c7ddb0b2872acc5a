"""An ASGI middleware around every route: counts requests by route and status, times
them (to the first body byte and to the end), and refuses a body over the limit with
413 before any of it is parsed. Plain ASGI, so streamed responses stay streamed."""
from __future__ import annotations

import json
import time

from gateway.api_error import ApiError
from gateway.metrics import GatewayMetrics

ROUTES = ("/v1/audio/speech", "/v1/chat/completions", "/v1/images/generations", "/v1/models", "/health",
          "/metrics")


def route_of(path: str) -> str:
    if path.startswith("/v1/models/"):
        return "/v1/models"
    return path if path in ROUTES else "other"


class HttpMetrics:
    def __init__(self, app, metrics: GatewayMetrics, max_body_bytes: int) -> None:
        self.app, self.metrics, self.max_body_bytes = app, metrics, max_body_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route, t0, status = route_of(scope["path"]), time.perf_counter(), [500]
        length = dict(scope.get("headers") or ()).get(b"content-length", b"0")
        if length.isdigit() and int(length) > self.max_body_bytes:
            await _too_large(send, self.max_body_bytes)
            self.metrics.requests.labels(route, "413").inc()
            return
        first = [True]

        async def timed_send(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body" and first[0] and message.get("body"):
                first[0] = False
                self.metrics.first_byte.labels(route).observe(time.perf_counter() - t0)
            await send(message)

        gauge = self.metrics.in_flight.labels(route)
        gauge.inc()
        try:
            await self.app(scope, receive, timed_send)
        finally:
            gauge.dec()
            self.metrics.requests.labels(route, str(status[0])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)


async def _too_large(send, limit: int) -> None:
    body = json.dumps(ApiError(413, f"request body over the limit of {limit} bytes (max_body_bytes)",
                               code="body_too_large").body()).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
