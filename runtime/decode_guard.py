"""Server interceptors that decode requests themselves: bytes that are not the method's
message become INVALID_ARGUMENT naming the message type, never UNKNOWN or INTERNAL.

gRPC decodes a request with the handler's deserializer before any handler code runs,
and answers a DecodeError raised there with UNKNOWN (grpc.aio) or INTERNAL (the thread
pool server). These interceptors take the deserializer out of each handler and run it
first thing in the handler instead, where its failure is the client's:

    grpc.aio.server(interceptors=[DecodeGuard(), ...])      # every starmesh process
    grpc.server(pool, interceptors=[SyncDecodeGuard()])     # the trace store

A streamed request (Component.Run, reflection) is decoded as the handler reads it: a
corrupt message raises `CorruptMessage` (an InvalidArgument) out of the request
iterator, for the handler to end its stream with (runtime.servicer does).
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable

import grpc

from core.errors import InvalidArgument


class CorruptMessage(InvalidArgument):
    """Request bytes that do not decode as the method's message type."""


def decode(deserializer: Callable[[bytes], Any], raw: bytes, method: str) -> Any:
    try:
        return deserializer(raw)
    except Exception as e:  # DecodeError, invalid UTF-8, nesting too deep: all the client's bytes
        raise CorruptMessage(f"request to {method}: {len(raw)} bytes do not decode as its message: {e}") from None


class DecodeGuard(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return _guard_aio(handler, handler_call_details.method)


def _guard_aio(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    deserializer, serializer = handler.request_deserializer, handler.response_serializer

    def one(raw, context):
        """The request, or None with the call's status set (the behaviour is not called)."""
        try:
            return decode(deserializer, raw, method)
        except CorruptMessage as e:
            _refuse(context, e)
            return None

    async def many(raw_iterator):
        async for raw in raw_iterator:
            yield decode(deserializer, raw, method)

    if not handler.request_streaming and not handler.response_streaming:
        behavior = handler.unary_unary

        async def unary_unary(raw, context):
            request = one(raw, context)
            return None if request is None else await _result(behavior(request, context))

        return grpc.unary_unary_rpc_method_handler(unary_unary, None, serializer)
    if not handler.request_streaming:
        behavior = handler.unary_stream

        async def unary_stream(raw, context):
            request = one(raw, context)
            if request is not None:
                async with contextlib.aclosing(_responses(behavior(request, context))) as responses:
                    async for response in responses:
                        yield response

        return grpc.unary_stream_rpc_method_handler(unary_stream, None, serializer)
    if not handler.response_streaming:
        behavior = handler.stream_unary

        async def stream_unary(raw_iterator, context):
            try:
                return await _result(behavior(many(raw_iterator), context))
            except CorruptMessage as e:  # a handler that let it through (ours end the call themselves)
                _refuse(context, e)

        return grpc.stream_unary_rpc_method_handler(stream_unary, None, serializer)
    behavior = handler.stream_stream

    async def stream_stream(raw_iterator, context):
        try:
            async with contextlib.aclosing(_responses(behavior(many(raw_iterator), context))) as responses:
                async for response in responses:
                    yield response
        except CorruptMessage as e:
            _refuse(context, e)

    return grpc.stream_stream_rpc_method_handler(stream_stream, None, serializer)


def _refuse(context, e: CorruptMessage) -> None:
    # Set, not context.abort(): an abort raised through grpc is kept in a reference
    # cycle with the handler's frames, and the raw bytes with them.
    context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
    context.set_details(str(e))


def _closing(result):
    return contextlib.aclosing(result) if hasattr(result, "aclose") else contextlib.nullcontext(result)


async def _result(result):
    # grpc.aio takes plain functions as well as coroutine functions as behaviours.
    return await result if inspect.isawaitable(result) else result


async def _responses(result):
    """Iterates what a streaming behaviour returned: an async generator, a plain
    iterator, or a coroutine that writes its responses with context.write.
    Closing this closes an async generator it iterates, at once: a cancelled call's
    handler chain then ends in one step, not one finalizer task per generator."""
    if inspect.isasyncgen(result) or hasattr(result, "__aiter__"):
        async with _closing(result):
            async for response in result:
                yield response
    elif inspect.isawaitable(result):
        await result
    else:
        for response in result:
            yield response


class SyncDecodeGuard(grpc.ServerInterceptor):
    """The same for a thread-pool `grpc.server` (unary requests only: the trace store's)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        method, deserializer = handler_call_details.method, handler.request_deserializer

        def one(raw, context):
            try:
                return decode(deserializer, raw, method)
            except CorruptMessage as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

        if handler.response_streaming:
            behavior = handler.unary_stream
            return grpc.unary_stream_rpc_method_handler(lambda raw, ctx: behavior(one(raw, ctx), ctx), None,
                                                        handler.response_serializer)
        behavior = handler.unary_unary
        return grpc.unary_unary_rpc_method_handler(lambda raw, ctx: behavior(one(raw, ctx), ctx), None,
                                                   handler.response_serializer)
