"""A long-lived session with one conductor: one grpc.aio channel that every call of a
front end shares (the HTTP gateway opens one at start), each call carrying its own
caller's `authorization` value ("Bearer <key>", as the caller sent it: the conductor
checks it, core/bearer.py).

    async with ConductorSession(Connection("127.0.0.1:50050")) as session:
        cards = await session.models(authorization)
        async for event in session.generate(GenerateCall("qwen3-omni", text="Hi"), authorization):
            ...

Failures raise client.call_failed.CallFailed. Leaving a `generate` iteration early (a
`break`, or the task being cancelled) cancels the RPC, and with it the request in the
mesh.
"""
from __future__ import annotations

from typing import AsyncIterator

from client.call_failed import call_failed
from client.connection import Connection
from client.events import Event, event_from_proto
from client.generate_call import GenerateCall
from client.model_card import ModelCard, cards_from_proto
from core.bearer import AUTHORIZATION, bearer_metadata


class ConductorSession:
    """connection: the conductor's address and TLS; its api_key, if any, is the token
    of calls that bring no authorization of their own."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._channel = None
        self._stub = None

    async def __aenter__(self) -> "ConductorSession":
        from protos.starmesh.v1 import conductor_pb2_grpc

        # the channel carries no token of its own: each call brings its caller's
        self._channel = Connection(self.connection.address, "", self.connection.tls,
                                   self.connection.max_message_bytes).aio_channel()
        self._stub = conductor_pb2_grpc.ConductorStub(self._channel)
        return self

    async def __aexit__(self, *exc) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _metadata(self, authorization: str) -> tuple:
        return ((AUTHORIZATION, authorization),) if authorization else bearer_metadata(self.connection.api_key)

    async def generate(self, call: GenerateCall, authorization: str = "",
                       timeout_s: float | None = None) -> AsyncIterator[Event]:
        """The request's events in order, `Usage` last."""
        import grpc

        # GenerateBatches: the events that were ready together arrive as one message
        stream = self._stub.GenerateBatches(call.to_proto(), timeout=timeout_s,
                                            metadata=self._metadata(authorization))
        try:
            async for batch in stream:
                for ev in batch.events:
                    event = event_from_proto(ev)
                    if event is not None:
                        yield event
        except grpc.aio.AioRpcError as e:
            raise call_failed(e) from None
        finally:
            stream.cancel()  # a no-op once the stream ended; otherwise the mesh frees the request

    async def models(self, authorization: str = "", timeout_s: float = 10.0) -> dict[str, ModelCard]:
        import grpc

        from protos.starmesh.v1 import conductor_pb2 as pb

        try:
            reply = await self._stub.ListModels(pb.ListModelsRequest(), timeout=timeout_s,
                                                metadata=self._metadata(authorization))
        except grpc.aio.AioRpcError as e:
            raise call_failed(e) from None
        return cards_from_proto(reply)

    async def health(self, service: str = "", timeout_s: float = 5.0) -> str:
        """The conductor's health of `service` ("" = the conductor, or a model name):
        "SERVING", "NOT_SERVING", ..., or the status name of a failed check
        ("UNAVAILABLE" when the conductor does not answer). Health needs no token."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        try:
            reply = await health_pb2_grpc.HealthStub(self._channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            return e.code().name
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    async def health_list(self, timeout_s: float = 5.0) -> dict[str, str]:
        """Every health name the conductor publishes ("" = itself, one per model) and its
        status; raises CallFailed when the conductor does not answer."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        try:
            reply = await health_pb2_grpc.HealthStub(self._channel).List(health_pb2.HealthListRequest(),
                                                                         timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise call_failed(e) from None
        name = health_pb2.HealthCheckResponse.ServingStatus.Name
        return {service: name(r.status) for service, r in reply.statuses.items()}

