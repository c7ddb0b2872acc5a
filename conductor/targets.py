"""Where node runs go: a component in this process, or a replica's `Component.Run`
stream. Both take batches of Run items and hand back batches of events, so the
executor works the same over either (co-location needs both)."""
from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Callable

from conductor.dispatch import Dispatch
from core.errors import Unavailable
from runtime.items import AcceptRoute, InboundItem, OpenNode
from runtime.message_split import oversized_error
from runtime.parts import part_name
from transport.codec import inline_ref
from transport.refs import TensorRef

log = logging.getLogger(__name__)
_stream_ids = itertools.count()


def named_parts(inputs: dict[str, tuple], convert: Callable[[Any], Any]) -> dict[str, Any]:
    """{port: parts} -> {"port": v} for one part, {"port#i": v_i} for several."""
    out = {}
    for port, parts in inputs.items():
        if len(parts) == 1:
            out[port] = convert(parts[0])
        else:
            out.update({part_name(port, i): convert(p) for i, p in enumerate(parts)})
    return out


class LocalTransport:
    """The transport of an in-process target: tensors stay tensors (no copy)."""

    class _Resolved:
        consumed = None

        def __init__(self, tensor) -> None:
            self.tensor = tensor

        def close(self) -> None:
            self.tensor = None

    def export(self, tensor, **_):
        return tensor

    def resolve(self, value, request_id: str = ""):
        if isinstance(value, TensorRef):
            from transport.codec import view

            if value.kind != "inline":
                raise ValueError("an in-process target takes tensors or inline references")
            value = view(value.location.data, value.dtype, value.shape)
        return self._Resolved(value)

    def release(self, *_args, **_kwargs) -> None:
        pass

    release_request = release_carrier = release

    def close(self) -> None:
        pass


class InProcessTarget:
    """A component hosted in this process on its own engine thread (runtime.step_loop)."""

    def __init__(self, component, loop: asyncio.AbstractEventLoop, sink, peers=None) -> None:
        """peers: the runtime.local_peers.LocalPeers of the process's engine threads (its
        routed edges go to the other targets' through it); None: no routes leave it."""
        from runtime.step_loop import StepLoop

        self.name = f"inproc:{component.name}"
        self.heartbeats = False  # an engine thread of this process: nothing to lose it
        self.step_loop = StepLoop(component, LocalTransport(), peers=peers.link(self.name) if peers else None)
        if peers is not None:
            peers.add(self.name, self.step_loop)
        self.stream_id = f"inproc-{next(_stream_ids)}"

        calls = self.step_loop.loop_calls

        def deliver(events) -> None:  # engine thread -> the executor's event loop
            if events:
                calls.call(loop, sink, events, self)

        self.step_loop.attach(self.stream_id, deliver)
        self.step_loop.start()

    def convert(self, value):
        return value

    def post(self, items: list[InboundItem]) -> None:
        self.step_loop.submit(self.stream_id, [(f"items[{i}]", item) for i, item in enumerate(items)])

    async def close(self) -> None:
        self.step_loop.stop(timeout=10)


def broken_reason(exc: BaseException) -> str:
    """Why a stream broke, for the requests it fails: a gRPC error as "CODE: details" (a
    stopped replica's reads "UNAVAILABLE: ... ping timeout"), anything else as its text."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code().name}: {details()}"
    return str(exc) or type(exc).__name__


class RemoteTarget:
    """One long-lived Run stream to a replica, multiplexing every request.
    post() never blocks: a writer task sends each batch as one RunRequest, in order."""

    def __init__(self, address: str, sink, max_message_bytes: int = 64 << 20, tls=None) -> None:
        """tls: the conductor's runtime.tls.TlsConfig for its streams (None: plaintext).
        The stream's channel has no client interceptors: a Run stream is untraced (each
        item carries its request's trace context), and grpc.aio runs every message of
        an intercepted stream through one more queue and task, on both directions."""
        self.name = address
        self.heartbeats = True  # the replica lists its requests on the stream (runtime.heartbeat)
        self._client_args = (address, max_message_bytes)
        self.tls = tls
        self.client = None
        self.sink = sink
        self.outbox: asyncio.Queue = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self.broken: BaseException | None = None
        self.num_reconnects = 0
        self.host_id = ""  # the replica's transport host id (Describe), for transport choice

    async def start(self) -> "RemoteTarget":
        from runtime.run_client import ComponentClient

        self.client = ComponentClient(*self._client_args, fresh_connection=self.num_reconnects > 0, tls=self.tls)
        await self.client.__aenter__()
        try:
            self.host_id = (await self.client.describe(timeout_s=5)).host_id
        except Exception:  # noqa: BLE001 - a replica that cannot answer breaks on the stream
            pass
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._write())]
        return self

    def convert(self, value):
        return value if isinstance(value, TensorRef) else inline_ref(value)

    def post(self, items: list[InboundItem]) -> None:
        if self.broken is not None:
            if not any(isinstance(i, (OpenNode, AcceptRoute)) for i in items):
                return  # cancels and credits for requests the broken stream already failed
            self._reconnect()
        self.outbox.put_nowait(items)

    def _reconnect(self) -> None:
        """A new stream for new requests once a replica broke (it may be back: a restart).
        Every request of the old stream has failed already; if the replica is still
        down, the new stream breaks too and fails the requests sent on it."""
        old_client, old_tasks = self.client, self._tasks
        self.broken, self.outbox, self._tasks = None, asyncio.Queue(), []
        self.num_reconnects += 1

        async def restart() -> None:
            for task in old_tasks:
                task.cancel()
            try:
                await old_client.close()
            except Exception:  # noqa: BLE001 - the old stream is already broken
                pass
            try:
                await self.start()
            except Exception as e:  # noqa: BLE001
                self._break(e)

        self._tasks = [asyncio.create_task(restart())]

    async def _write(self) -> None:
        try:
            while True:
                items = await self.outbox.get()
                while not self.outbox.empty():  # posted while the last write was in flight: one message
                    items = items + self.outbox.get_nowait()
                too_big = await self.client.send(items)
                if too_big:  # those requests fail; the stream and its other requests go on
                    self.sink([oversized_error(i, self.client.max_message_bytes) for i in too_big], self)
        except Exception as e:
            self._break(e)

    async def _read(self) -> None:
        try:
            while True:
                self.sink(await self.client.recv(rows=True), self)  # a batch stays columns: Executor.on_events
        except Exception as e:
            self._break(e)

    def _break(self, exc: BaseException) -> None:
        if self.broken is None and not isinstance(exc, asyncio.CancelledError):
            self.broken = exc
            self.sink([], self)  # the executor fails every request this stream carried

    def abandon(self, reason: str) -> None:
        """Gives the stream up from outside, as if it broke (its replica went silent:
        conductor.liveness): the next request opens a new one, the replica may be back."""
        self._break(Unavailable(reason))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.client is not None:
            await self.client.close()


def run_item(request_id: str, walk: str, dispatch: Dispatch, params: dict, convert, traceparent: str = "", scope=None,
             consumer_host_ids: tuple[str, ...] = (), routes: tuple = (), pace=None,
             quiet: tuple[str, ...] | None = None, contexts: tuple = ()):
    """The Run item for a dispatch: an OpenNode, or a PushChunk into an open loop run.
    routes: the routed streaming edges the run feeds (conductor.route_plan); pace: when
    the node's items are due (core.pace; a chunk run's from its first new item on);
    quiet: the ports its service keeps to itself (None: those only routed edges read);
    contexts: the request's kept KV contexts (core.context_use), on every run it opens;
    consumer_host_ids: the hosts of the services that read its outputs, beside the
    ports the conductor or its client reads (the scope's client_ports, sent inline)."""
    from runtime.items import PushChunk, StopRule, StreamInput

    if dispatch.push:
        port, chunk = scope.pushed[dispatch.node].dst_port, dispatch.chunk
        parts = dispatch.inputs.get(port, ())
        tensors = named_parts({port: parts}, convert) if parts else {}
        return PushChunk(request_id, dispatch.node, port, dispatch.iteration, tensors, chunk.is_last,
                         chunk.num_context, chunk.num_pad)

    stop, max_iters = StopRule(), 0
    if dispatch.loop is not None:  # a loop run inside its component: what the service evaluates
        rule = dispatch.loop.stop
        max_iters = dispatch.loop.max_iters
        if rule is not None:
            stop = StopRule(stop_token_ids=rule.stop_token_ids, component_predicate=rule.component_predicate)
    pushed = scope.pushed.get(dispatch.node) if scope is not None else None
    stream = StreamInput(pushed.dst_port, pushed.continue_after_producer_done) if pushed is not None else None
    if quiet is None:
        quiet = scope.quiet_ports.get(dispatch.node, ()) if scope is not None and routes else ()
    if pace is not None and dispatch.chunk is not None:
        pace = pace.starting_at(dispatch.chunk.first_new)
    return OpenNode(
        request_id, dispatch.node, walk, dispatch.iteration, named_parts(dispatch.inputs, convert),
        params, stop, traceparent, consumer_host_ids=consumer_host_ids, credits=dispatch.credits, chunk=dispatch.chunk,
        stream=stream, routes=routes, quiet_ports=quiet, max_iters=max_iters, pace=pace, contexts=contexts,
        client_ports=scope.client_ports.get(dispatch.node, ()) if scope is not None else (),
    )
