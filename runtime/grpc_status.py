"""Domain errors -> gRPC status codes: one decorator for every handler, and the
(status, message) of a NodeError for failures inside the Run stream.

`StarmeshError` subclasses carry the name of their status (`status`); their
message already names the bad field, so it becomes the status details as is.
Anything else is a bug: logged with its traceback, answered with INTERNAL.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from typing import Any, Callable

import grpc

from core.errors import FieldError, StarmeshError

log = logging.getLogger(__name__)


def failure(exc: BaseException, where: str) -> tuple[str, str]:
    """(status name, message) for a NodeError about an exception raised in `where`.

    Domain errors keep their status; anything else is a bug: logged, INTERNAL.
    """
    if isinstance(exc, FieldError):
        return exc.status, str(exc)
    if isinstance(exc, StarmeshError):
        return exc.status, f"{where}: {exc}"
    log.error("%s failed", where, exc_info=exc)
    return "INTERNAL", f"{where}: internal error: {type(exc).__name__}: {exc}"


def status_code(name: str) -> grpc.StatusCode:
    """grpc.StatusCode by name; an unknown name is itself a bug, so INTERNAL."""
    return grpc.StatusCode.__members__.get(name, grpc.StatusCode.INTERNAL)


def _passes_through(exc: BaseException) -> bool:
    # Aborts the handler raised itself, and cancellation of the RPC, are not ours to map.
    return isinstance(exc, (asyncio.CancelledError, grpc.aio.AbortError, grpc.RpcError))


def retry_trailers(code: grpc.StatusCode, message: str, retry_after_ms: int) -> tuple[tuple[str, Any], ...]:
    """A retry hint as gRPC clients read it: google.rpc.RetryInfo in the status details
    (`grpc-status-details-bin`), and a plain `retry-after-ms` trailer for the rest."""
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2

    delay = duration_pb2.Duration()
    delay.FromMilliseconds(retry_after_ms)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return (("retry-after-ms", str(retry_after_ms)), ("grpc-status-details-bin", status.SerializeToString()))


def _status(exc: Exception, method: str) -> tuple[grpc.StatusCode, str, tuple]:
    """(code, details, trailers): a retry hint rides along when the error carries one."""
    if isinstance(exc, StarmeshError):
        code, message = status_code(exc.status), str(exc)
        retry_ms = getattr(exc, "retry_after_ms", None)
        return code, message, (retry_trailers(code, message, retry_ms) if retry_ms is not None else ())
    log.error("%s failed", method, exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}", ()


def _end(context: grpc.aio.ServicerContext, status: tuple[grpc.StatusCode, str, tuple]) -> None:
    # The status is set and the handler returns: context.abort() would raise through
    # grpc, whose handling keeps the exception in a reference cycle with this handler's
    # frames, and so the request (megabytes, for a refused oversized one) until the next
    # garbage collection, which a burst of refusals outpaces.
    context.set_code(status[0])
    context.set_details(status[1])
    if status[2]:
        context.set_trailing_metadata(status[2])


def map_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates an async unary handler or an async-generator streaming handler of a
    grpc.aio servicer (signature `(self, request, context)`)."""
    name = handler.__qualname__
    if inspect.isasyncgenfunction(handler):

        @functools.wraps(handler)
        async def stream_wrapper(self, request, context):
            status = None
            try:
                async with contextlib.aclosing(handler(self, request, context)) as responses:
                    async for response in responses:
                        yield response
            except Exception as e:
                if _passes_through(e):
                    raise
                status = _status(e, name)
            if status is not None:
                _end(context, status)

        return stream_wrapper

    @functools.wraps(handler)
    async def unary_wrapper(self, request, context):
        status = None
        try:
            return await handler(self, request, context)
        except Exception as e:
            if _passes_through(e):
                raise
            status = _status(e, name)
        _end(context, status)
        return None

    return unary_wrapper
