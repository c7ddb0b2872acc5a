"""How the gateway answers: JSON bodies and errors in OpenAI's shape, streamed bodies
that close their conductor call whatever happens (the end, a failure, the client
leaving), and non-streamed work that stops when its client leaves."""
from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator, Awaitable

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from gateway.api_error import ApiError
from gateway.conductor_calls import Primed
from gateway.metrics import GatewayMetrics
from gateway.sse import MEDIA_TYPE as SSE
from gateway.sse import event


class ClientGone(Exception):
    """The client disconnected before its answer was ready (its work was cancelled)."""


def error_response(e: ApiError) -> Response:
    """e in OpenAI's shape. ASCII JSON: a message that echoes a client's string with a
    lone surrogate (valid in JSON, not in UTF-8) still encodes."""
    return Response(json.dumps(e.body()), status_code=e.status, headers=e.headers, media_type="application/json")


def streamed(body: AsyncIterator[bytes], primed: Primed, media_type: str, route: str, metrics: GatewayMetrics,
             request_id: str) -> StreamingResponse:
    """A streamed response over `body`. A failure after the first byte cannot change the
    status: an SSE stream gets an error event, a raw one breaks off (the client sees a
    truncated body). The call is closed (cancelled, if still running) in every case."""

    async def guarded() -> AsyncIterator[bytes]:
        try:
            async for data in body:
                yield data
        except ApiError as e:
            if media_type != SSE:
                raise
            yield event(e.body())
        except (asyncio.CancelledError, GeneratorExit):
            metrics.disconnects.labels(route).inc()
            raise
        finally:
            await primed.close()

    return StreamingResponse(guarded(), media_type=media_type, headers={"x-request-id": request_id})


async def unless_disconnected(request: Request, work: Awaitable, route: str, metrics: GatewayMetrics):
    """`work`'s result, or ClientGone (with `work` cancelled) when the client leaves first.
    The request body has been read, so the next ASGI message is the disconnect."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            # wait for it to unwind: until then it may still be inside what it iterates
            # (the conductor call's event stream), which the caller closes next
            await asyncio.wait({task})
    if task.cancelled() or not task.done():
        metrics.disconnects.labels(route).inc()
        raise ClientGone()
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
