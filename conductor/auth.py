"""The conductor's token check as a server interceptor: a Conductor call without the
right `authorization: Bearer <key>` metadata (core/bearer.py) is answered
UNAUTHENTICATED before its request is read, so it costs no decoding, no copy of its
body and no work. Every other service of the server (health, reflection) passes
untouched: probes and load balancers need no token.

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
        if not details.method.startswith(self.prefixes):
            return await continuation(details)
        value = next((v for k, v in details.invocation_metadata or () if k == AUTHORIZATION), None)
        try:
            check_bearer(value, self.api_key)
        except Unauthenticated as e:
            return _refusal(str(e))
        return await continuation(details)


def _refusal(message: str) -> grpc.RpcMethodHandler:
    """A handler that answers UNAUTHENTICATED: `message`, whatever the method's kind.

    It is request-streaming with no deserializer, and never reads its request iterator:
    grpc.aio reads a streamed request only when the handler asks for a message, so the
    body (up to the receive limit, tens of megabytes) is neither copied into Python nor
    decoded; the call ends as the status is sent. A unary request and a one-message
    stream are the same on the wire, so a unary client gets this status like any other.
    The status is set, not raised with context.abort(): an abort keeps the handler's
    frames in a reference cycle until the next garbage collection."""

    async def refuse(request_iterator, context: grpc.aio.ServicerContext) -> None:
        context.set_code(grpc.StatusCode.UNAUTHENTICATED)
        context.set_details(message)

    return grpc.stream_stream_rpc_method_handler(refuse)
