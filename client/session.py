"""A session with one conductor: the one place a Generate request is sent and its events
read (client.events parses them), ListModels asked and Sessions streams opened
(`conversation` for the SDK, `session_stream` in plain data for a front end).

    async with ConductorSession(Connection("127.0.0.1:50050")) as session:
        cards = await session.models(authorization)
        async for event in session.generate(GenerateCall("omni", text="Hi"), authorization):
            ...

The conductor is a HOST:PORT (plaintext, the key from $STARMESH_API_KEY if set), a
client.connection.Connection (its key and TLS), whose channel the session opens and
closes; or an open grpc.aio channel, which many sessions share and which stays open
(concurrent requests then skip a connection setup each). A front end that serves many
callers (the HTTP gateway) opens one session and passes each call its caller's
`authorization` value ("Bearer <key>", as the caller sent it: the conductor checks it,
core/bearer.py); a call without one carries the connection's key.

Failures raise client.call_failed.CallFailed; `stream` gives the same events with the
grpc.aio.AioRpcError as it came, for callers that match on gRPC status codes. Leaving a
`generate` iteration early (a `break`, or the task being cancelled) cancels the RPC, and
with it the request in the mesh.
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Mapping

from client.call_failed import call_failed
from client.connection import Connection
from client.events import Event, event_from_proto
from client.generate_call import GenerateCall
from client.model_card import ModelCard, cards_from_proto
from client.session_stream import SessionStream
from core.bearer import AUTHORIZATION, bearer_metadata
from core.context_use import END_USER
from core.session_events import Input


class ConductorSession:
    """conductor: HOST:PORT, a Connection (its api_key, if any, is the token of calls
    that bring no authorization of their own) or an open grpc.aio channel."""

    def __init__(self, conductor: "str | Connection | grpc.aio.Channel") -> None:
        if isinstance(conductor, str):
            conductor = Connection.from_env(conductor)
        self.connection = conductor if isinstance(conductor, Connection) else None
        self._shared = None if self.connection is not None else conductor  # a caller's channel: never closed here
        self._channel = self._shared
        self._stub = None

    @property
    def channel(self):
        """The open grpc.aio channel (inside `async with`)."""
        return self._channel

    async def __aenter__(self) -> "ConductorSession":
        from protos.starmesh.v1 import conductor_pb2_grpc

        if self._shared is None:
            c = self.connection  # the channel carries no token of its own: each call brings its caller's
            self._channel = Connection(c.address, "", c.tls, c.max_message_bytes).aio_channel()
        self._stub = conductor_pb2_grpc.ConductorStub(self._channel)
        return self

    async def __aexit__(self, *exc) -> None:
        if self._channel is not None and self._shared is None:
            await self._channel.close()
            self._channel = None

    def _metadata(self, authorization: str) -> tuple:
        if authorization:
            return ((AUTHORIZATION, authorization),)
        return bearer_metadata(self.connection.api_key) if self.connection is not None else ()

    async def stream(self, call: GenerateCall, authorization: str = "",
                     timeout_s: float | None = None) -> AsyncIterator[Event]:
        """The request's events in order, `Usage` last; a failure raises the
        grpc.aio.AioRpcError as it came."""
        # GenerateBatches: the events that were ready together arrive as one message
        metadata = self._metadata(authorization) + (((END_USER, call.end_user),) if call.end_user else ())
        rpc = self._stub.GenerateBatches(call.to_proto(), timeout=timeout_s, metadata=metadata)
        try:
            async for batch in rpc:
                for ev in batch.events:
                    event = event_from_proto(ev)
                    if event is not None:
                        yield event
        finally:
            rpc.cancel()  # a no-op once the stream ended; otherwise the mesh frees the request

    async def generate(self, call: GenerateCall, authorization: str = "",
                       timeout_s: float | None = None) -> AsyncIterator[Event]:
        """The request's events in order, `Usage` last; a failure raises CallFailed."""
        import grpc

        events = self.stream(call, authorization, timeout_s)
        try:
            async for event in events:
                yield event
        except grpc.aio.AioRpcError as e:
            raise call_failed(e) from None
        finally:
            await events.aclose()

    def session_stream(self, inputs: AsyncIterator[Input], authorization: str = "",
                       end_user: str = "") -> SessionStream:
        """A Sessions.Session stream in plain data (client.session_stream): `inputs` written
        as they come, carrying the caller's `authorization` ("Bearer <key>", as the caller
        sent it; none: the connection's key)."""
        metadata = self._metadata(authorization) + (((END_USER, end_user),) if end_user else ())
        return SessionStream(self._channel, metadata, inputs)

    def conversation(self, model: str, output_modalities: tuple[str, ...] = ("audio",), instructions: str = "",
                     voice: str = "", input_sample_rate: int = 0, params: Mapping[str, Any] | None = None,
                     turn_detection=None, authorization: str = "", end_user: str = ""):
        """A Sessions.Session stream as a client.conversation.Conversation (`async with`);
        turn_detection: a starmesh.v1.TurnDetection for server VAD, None for none."""
        from client.conversation import Conversation
        from client.session_proto import modality_number
        from protos.starmesh.v1 import session_pb2 as pb

        config = pb.SessionConfig(model=model, instructions=instructions, voice=voice,
                                  input_sample_rate=input_sample_rate,
                                  output_modalities=[modality_number(m) for m in output_modalities])
        if turn_detection is not None:
            config.turn_detection.CopyFrom(turn_detection)
        if params:
            config.params.update(dict(params))
        metadata = self._metadata(authorization) + (((END_USER, end_user),) if end_user else ())
        return Conversation(self._channel, metadata, config)

    async def models(self, authorization: str = "", timeout_s: float = 10.0) -> dict[str, ModelCard]:
        """name -> ModelCard of every served model, in the conductor's order."""
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


async def model_card(session: ConductorSession, name: str, authorization: str = "") -> ModelCard:
    """`name`'s card; CallFailed INVALID_ARGUMENT naming the model when it is not served."""
    from client.call_failed import CallFailed

    cards = await session.models(authorization)
    if name not in cards:
        raise CallFailed("INVALID_ARGUMENT", f"model {name!r} is not served here (served: {list(cards)})")
    return cards[name]
