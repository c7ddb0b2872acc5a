"""GET /v1/realtime?model=NAME: the OpenAI Realtime protocol (GA) over a WebSocket, one
conductor `Sessions.Session` stream per connection (client.session_stream, in plain
data). The gateway only translates: each client event is one session Input
(gateway.realtime_input), each session event the server events it means
(gateway.realtime_output); the conversation, VAD and the model are the conductor's.

Auth: `Authorization: Bearer KEY` or, from a browser (which cannot set headers on a
WebSocket), the subprotocol `openai-insecure-api-key.KEY` beside `realtime`; the
handshake echoes `realtime` as OpenAI does. The key goes to the conductor with the
stream, which checks it: a refused key is an `error` event (code `unauthenticated`) and
a close with 1008. A bad client event is an `error` event naming the field and the
event; the session goes on. A client that stops reading is disconnected once its
queued events pass `max_send_queue_bytes` (gateway.realtime_send_queue), and its
session's stream is cancelled, which frees the session in the mesh.
"""
from __future__ import annotations

import asyncio
import contextlib
import json

from fastapi import APIRouter, WebSocket

from client.call_failed import CallFailed
from core.session_events import Input
from gateway.api_error import HTTP_OF, ApiError
from gateway.realtime_fields import EventError, error_event
from gateway.realtime_input import ClientEvents
from gateway.realtime_output import ServerEvents
from gateway.realtime_send_queue import ClientNotReading, SendQueue
from gateway.realtime_session_config import first_config

router = APIRouter()
KEY_PROTOCOL = "openai-insecure-api-key."
NORMAL, POLICY, SERVER_ERROR = 1000, 1008, 1011   # WebSocket close codes
REQUESTS_QUEUED = 16   # client events translated and not yet taken by the conductor's stream
CLOSE_WAIT_S = 2.0   # how long a close frame may wait on a client that does not read


def credentials(ws: WebSocket) -> tuple[str, str | None]:
    """(the Authorization value the conductor checks, the subprotocol to accept)."""
    offered = list(ws.scope.get("subprotocols") or [])
    header = ws.headers.get("authorization", "")
    key = next((p[len(KEY_PROTOCOL):] for p in offered if p.startswith(KEY_PROTOCOL)), "")
    if not header and key:
        header = f"Bearer {key}"
    return header, "realtime" if "realtime" in offered else None


@router.websocket("/v1/realtime")
async def realtime(ws: WebSocket) -> None:
    authorization, subprotocol = credentials(ws)
    await ws.accept(subprotocol=subprotocol)
    gw = ws.app.state.gateway
    connection = RealtimeConnection(ws, gw, authorization)
    gw.metrics.realtime_sessions.inc()
    try:
        await connection.run(ws.query_params.get("model", ""))
    finally:
        gw.metrics.realtime_sessions.dec()
        gw.metrics.realtime_closes.labels(connection.outcome).inc()


class RealtimeConnection:
    def __init__(self, ws: WebSocket, gateway, authorization: str) -> None:
        self.ws, self.gateway, self.authorization = ws, gateway, authorization
        self.queue = SendQueue(gateway.config.realtime.max_send_queue_bytes)
        self.close_code, self.close_reason = NORMAL, ""
        self.outcome = "client_closed"   # how it ended, for the metrics
        self.stream = None   # the conductor's session stream (client.session_stream)
        self.requests: asyncio.Queue = asyncio.Queue(maxsize=REQUESTS_QUEUED)

    async def run(self, model: str) -> None:
        sender = asyncio.create_task(self._send())
        try:
            await self._session(model)
        except ClientNotReading as e:
            self.outcome = "client_not_reading"
            sender.cancel()
            await self._cancel_call()
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(self.ws.close(POLICY, str(e)[:120]), CLOSE_WAIT_S)
            return
        except BaseException:
            sender.cancel()
            raise
        finally:
            await self._cancel_call()
        self.queue.close()
        with contextlib.suppress(Exception):
            await sender

    async def _session(self, model: str) -> None:
        if not model:
            return self._fail(ApiError(400, "the model query parameter is required: /v1/realtime?model=NAME",
                                       param="model"), POLICY)
        if any(not 32 <= ord(c) < 127 for c in self.authorization):
            return self._fail(ApiError(401, "Authorization: printable ASCII only", "authentication_error",
                                       code="unauthenticated"), POLICY)
        try:
            # the key is checked here, by a call that ends before the stream opens: a
            # stream the conductor refuses at once can fail the gateway's first write
            # first, which grpc reports as INTERNAL instead of the refusal
            await self.gateway.catalog.refresh(self.authorization)
            card = await self.gateway.catalog.card(model, self.authorization)
        except ApiError as e:
            return self._fail(e, POLICY if e.status < 500 else SERVER_ERROR)
        inputs, events = ClientEvents(card, self.gateway.config.realtime), ServerEvents(card)
        self.stream = self.gateway.session.session_stream(self._requests(), self.authorization)
        await self.requests.put(Input("", "configure", first_config(card)))
        pumps = [asyncio.create_task(self._from_client(inputs)), asyncio.create_task(self._from_conductor(events))]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        for task in done:
            task.result()   # ClientNotReading goes up

    async def _from_client(self, inputs: ClientEvents) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            frame = message.get("text") if message.get("text") is not None else message.get("bytes", b"")
            try:
                request = inputs.translate(frame)
            except EventError as e:
                self._put(error_event(e.error, e.event_id))
                continue
            await self.requests.put(request)   # waits while the conductor's stream is full

    async def _requests(self):
        """The stream's inputs, written as they come (a stream that has ended stops
        reading them; its status is what _from_conductor reads)."""
        while True:
            yield await self.requests.get()

    async def _from_conductor(self, events: ServerEvents) -> None:
        try:
            while (event := await self.stream.read()) is not None:
                for out in events.translate(event):
                    self._put(out)
        except CallFailed as e:
            status, type_ = HTTP_OF.get(e.code, (500, "server_error"))
            self._fail(ApiError(status, e.message or e.code, type_, code=e.code.lower()),
                       POLICY if e.code in ("UNAUTHENTICATED", "PERMISSION_DENIED", "INVALID_ARGUMENT")
                       else SERVER_ERROR)
            return
        self.outcome = "conductor_ended"

    def _fail(self, error: ApiError, close_code: int) -> None:
        self.outcome = error.code or "error"
        self._put(error_event(error))
        # a close frame's reason holds 123 bytes at most
        self.close_code, self.close_reason = close_code, error.message.encode()[:120].decode(errors="ignore")

    def _put(self, event: dict) -> None:
        self.queue.put(json.dumps(event))

    async def _send(self) -> None:
        """Writes queued events in order; after the last, closes with the code set."""
        while (text := await self.queue.get()) is not None:
            await self.ws.send_text(text)
        await self.ws.close(self.close_code, self.close_reason)

    async def _cancel_call(self) -> None:
        if self.stream is not None:
            self.stream.cancel()   # a no-op once it ended; otherwise the conductor ends the session and frees it
