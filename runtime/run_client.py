"""Async client of one `Component.Run` stream: what a conductor (or a tool) holds per replica.

    async with ComponentClient("127.0.0.1:50051") as run:
        await run.send([OpenNode(...), OpenNode(...)])   # one message
        events = await run.recv()                        # one engine step's events

Tensors inside events stay TensorRefs; resolve them with a Transport, then
acknowledge the leases with a Release item.
"""
from __future__ import annotations

import logging

import grpc

from protos.starmesh.v1 import component_pb2, component_pb2_grpc
from runtime.items import InboundItem, NodeDone, NodeError, OutboundEvent
from runtime.item_proto import events_from_proto, items_to_proto
from runtime.keepalive import CHANNEL_OPTIONS
from runtime.message_split import split
from runtime.tls import TlsConfig, aio_channel

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


class StreamClosed(Exception):
    """The service ended the Run stream."""


class ComponentClient:
    def __init__(self, address: str, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, interceptors=None,
                 fresh_connection: bool = False, tls: TlsConfig | None = None) -> None:
        """fresh_connection: a connection of this client's own, so a stream opened right
        after the replica restarted does not inherit the reconnect backoff (and the last
        "connection refused") of streams that failed while it was down.
        tls: TLS to the replica (presenting this process's certificate); None: plaintext."""
        options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            *CHANNEL_OPTIONS,  # a replica that stops answering breaks the stream (runtime/keepalive.py)
        ]
        if fresh_connection:
            options.append(("grpc.use_local_subchannel_pool", 1))
        self.address = address
        self.max_message_bytes = max_message_bytes
        self.channel = aio_channel(address, tls, options, interceptors)
        self.stub = component_pb2_grpc.ComponentStub(self.channel)
        self.call = None

    async def __aenter__(self) -> "ComponentClient":
        self.call = self.stub.Run()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def describe(self, timeout_s: float = 10.0) -> component_pb2.ComponentInfo:
        return await self.stub.Describe(component_pb2.DescribeRequest(), timeout=timeout_s)

    async def send(self, items: list[InboundItem], sender: str = "") -> list[InboundItem]:
        """Sends every item in one RunRequest, or in several when one would pass the
        message limit; returns the items too large to send at all (their requests
        must fail, the stream stays up)."""
        parts, oversized = split(items_to_proto(items, sender), "items", self.max_message_bytes)
        for part in parts:
            await self.call.write(part)
        return [items[i] for i in oversized]

    async def recv(self, rows: bool = False) -> list[OutboundEvent]:
        """rows: a batch of outputs comes as one runtime.received_rows.ReceivedRows."""
        msg = await self.call.read()
        if msg is grpc.aio.EOF:
            raise StreamClosed(f"{self.address} closed the Run stream")
        return events_from_proto(msg, rows)

    async def until_finished(self, request_ids) -> dict[str, list[OutboundEvent]]:
        """Collects events until every request has a NodeDone or NodeError."""
        pending = set(request_ids)
        events: dict[str, list[OutboundEvent]] = {r: [] for r in pending}
        while pending:
            for ev in await self.recv():
                events.setdefault(ev.request_id, []).append(ev)
                if isinstance(ev, (NodeDone, NodeError)):
                    pending.discard(ev.request_id)
        return events

    async def close(self) -> None:
        """Half-closes the stream, cancels it and closes the channel. A stream the service
        already ended (it stopped, or the call failed) is closed all the same: grpc raises
        from done_writing on a call whose end it has not processed yet (InternalError,
        "ExecuteBatchError"), and that is not a failure of this close."""
        if self.call is not None:
            try:
                await self.call.done_writing()
            except (grpc.aio.AioRpcError, grpc.aio.InternalError) as e:
                log.debug("Run stream to %s was already closed: %s", self.address, e)
            self.call.cancel()
            self.call = None
        await self.channel.close()
