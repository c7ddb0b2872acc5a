"""One conductor `Sessions.Session` stream in plain data: the caller's inputs
(core.session_events.Input) are written as they come, the conductor's events read as
their dataclasses (client.session_proto). What a front end that relays a session uses
(the gateway's /v1/realtime); client.conversation is the SDK's object over the same
stream.

    stream = session.session_stream(inputs, authorization)   # inputs: an async iterator of Input
    while (event := await stream.read()) is not None:
        ...                                                   # SessionState, TextOut, AudioOut, ...
    stream.cancel()                                           # the conductor ends the session

A failed stream (a refused key, too many sessions, expiry) raises CallFailed from `read`.
"""
from __future__ import annotations

from typing import Any, AsyncIterator

from client.call_failed import call_failed
from client.session_proto import event_from_proto, input_to_proto
from core.session_events import Input


class SessionStream:
    def __init__(self, channel, metadata: tuple, inputs: AsyncIterator[Input]) -> None:
        """channel: an open grpc.aio channel; metadata: the call's (its authorization)."""
        from protos.starmesh.v1 import session_pb2_grpc

        # grpc reads the inputs in a task of its own; a stream that has ended stops reading them
        self._call = session_pb2_grpc.SessionsStub(channel).Session(_messages(inputs), metadata=metadata)

    async def read(self) -> Any:
        """The next event; None once the stream ended well; CallFailed when it failed."""
        import grpc

        while True:
            try:
                message = await self._call.read()
            except grpc.aio.AioRpcError as e:
                raise call_failed(e) from None
            if message is grpc.aio.EOF:
                return None
            event = event_from_proto(message)
            if event is not None:
                return event

    def cancel(self) -> None:
        """Ends the stream (a no-op once it ended); the conductor frees the session."""
        self._call.cancel()


async def _messages(inputs: AsyncIterator[Input]):
    async for inp in inputs:
        yield input_to_proto(inp)
