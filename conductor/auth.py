"""The conductor's token check as a server interceptor: a Conductor call without the
right `authorization: Bearer <key>` metadata (core/bearer.py) is answered
UNAUTHENTICATED before its handler runs, so it costs no parsing and no work. Every
other service of the server (health, reflection) passes untouched: probes and load
balancers need no token.

    ConductorService(models, api_key=key)    # installs ApiKeyInterceptor on its server
"""
from __future__ import annotations

import grpc

from core.bearer import AUTHORIZATION, check_bearer
from core.errors import Unauthenticated


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls to the methods of `services` (full gRPC service names) without the
    right token, with UNAUTHENTICATED; every other method passes untouched."""

    def __init__(self, api_key: str, services: tuple[str, ...]) -> None:
        if not api_key:
            raise ValueError("api_key is empty (no token: no interceptor)")
        self.api_key = api_key
        self.prefixes = tuple(f"/{s}/" for s in services)

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)  # the method's handler, not run yet
        if handler is None or not details.method.startswith(self.prefixes):
            return handler
        value = next((v for k, v in details.invocation_metadata or () if k == AUTHORIZATION), None)
        try:
            check_bearer(value, self.api_key)
        except Unauthenticated as e:
            return _refusal(handler, str(e))
        return handler


def _refusal(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s kind that only answers UNAUTHENTICATED: `message`."""

    async def refuse(request_or_iterator, context: grpc.aio.ServicerContext):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    codecs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(refuse, **codecs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse, **codecs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse, **codecs)
    return grpc.stream_stream_rpc_method_handler(refuse, **codecs)
