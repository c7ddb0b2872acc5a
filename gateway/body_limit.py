"""Request bodies read within bounds, whatever their framing (Content-Length or
chunked), before any route sees them:

- one body: counted as its chunks arrive and refused with 413 as soon as it passes
  `max_body_bytes` (a declared Content-Length over it is refused before a byte is read);
- every body at once: the bytes of bodies held in memory, across all connections, are
  capped by a BodyBudget; a body whose next bytes would pass it is refused with 429 and
  Retry-After (bodies in flight leave as their requests end: the client may retry);
- time: a body must arrive whole within `timeout_s` (408 past it).

A body holds its share of the budget as its bytes arrive (what a Content-Length promises
is not taken ahead: a client could then hold the cap without sending anything) and until
its request's response ends (the route keeps the parsed body for as long as it
streams); the deadline bounds how long a client that stops sending holds it. A refusal
closes the connection, so a client still sending learns of it at once and the rest of
its body is never read. A client that leaves mid-body costs nothing more: no route runs
for it.
"""
from __future__ import annotations

import asyncio

from gateway.api_error import ApiError
from gateway.responses import error_response

RETRY_AFTER_S = 1  # bodies in flight drain as requests end: a second is a fair first wait


class BodyBudget:
    """The bytes of request bodies held across all connections, at most `capacity`;
    gauge: set to the bytes held at each change (None: none)."""

    def __init__(self, capacity: int, gauge=None) -> None:
        self.capacity, self.held, self.gauge = capacity, 0, gauge

    def take(self, n: int) -> bool:
        """Holds n more bytes if they fit (False, holding nothing, otherwise)."""
        if self.held + n > self.capacity:
            return False
        self._set(self.held + n)
        return True

    def give(self, n: int) -> None:
        self._set(self.held - n)

    def _set(self, held: int) -> None:
        self.held = held
        if self.gauge is not None:
            self.gauge.set(held)


class _Hold:
    """One request's share of the budget: grown as its body arrives, given back at its end."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget, self.size = budget, 0

    def grow_to(self, size: int) -> bool:
        if size <= self.size:
            return True
        if not self.budget.take(size - self.size):
            return False
        self.size = size
        return True

    def release(self) -> None:
        self.budget.give(self.size)
        self.size = 0


class _Refused(Exception):
    def __init__(self, error: ApiError) -> None:
        super().__init__(error.message)
        self.error = error


class _Gone(Exception):
    """The client disconnected before its body was complete."""


class BodyLimit:
    """ASGI middleware: reads each HTTP request's body within the bounds (module
    docstring), then runs the app with the whole body as its one request message."""

    def __init__(self, app, max_body_bytes: int, budget: BodyBudget, timeout_s: float) -> None:
        self.app, self.max_body_bytes, self.budget, self.timeout_s = app, max_body_bytes, budget, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        hold = _Hold(self.budget)
        try:
            try:
                async with asyncio.timeout(self.timeout_s):
                    body = await self._read(scope, receive, hold)
            except TimeoutError:
                return await _refuse(scope, receive, send, ApiError(
                    408, f"request body not received whole within {self.timeout_s:g} s (body_timeout_s)",
                    code="body_timeout"))
            except _Refused as e:
                return await _refuse(scope, receive, send, e.error)
            except _Gone:
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            hold.release()

    async def _read(self, scope, receive, hold: _Hold) -> bytes:
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            raise _Refused(self._too_large())  # before a byte is read
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _Refused(self._too_large())
            if not hold.grow_to(size):
                raise _Refused(self._over_budget())
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> ApiError:
        return ApiError(413, f"request body over the limit of {self.max_body_bytes} bytes (max_body_bytes)",
                        code="body_too_large")

    def _over_budget(self) -> ApiError:
        return ApiError(429, f"the gateway holds its limit of {self.budget.capacity} bytes of request bodies in "
                             "flight (max_bodies_in_flight_bytes); retry after a moment", "rate_limit_error",
                        code="bodies_in_flight", headers={"Retry-After": str(RETRY_AFTER_S),
                                                          "retry-after-ms": str(1000 * RETRY_AFTER_S)})


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


def _replay(body: bytes, receive):
    """A receive that gives the read body first, then the connection's own messages
    (a disconnect, which routes watch for)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed



async def _refuse(scope, receive, send, error: ApiError) -> None:
    refusal = error_response(error)
    refusal.headers["connection"] = "close"  # the rest of the body is never read
    await refusal(scope, receive, send)
