"""The gRPC server base shared by the conductor and every component service.

`GrpcServer` hosts one `HostedService` on a grpc.aio server with what every
starmesh process needs: health checking (NOT_SERVING until the hosted service
is ready), reflection, raised message limits, OpenTelemetry interceptors and
a graceful stop (health NOT_SERVING, drain in-flight work within the grace
period, stop the server, close the hosted service, which releases its arena).

`serve()` runs one until SIGTERM/SIGINT, and `serve_blocking()` does so in a fresh
event loop (the `starmesh serve` and `starmesh conductor` processes);
`runtime.background.BackgroundServer` runs one on a thread (tests).
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from core import event_loop
from core.priority import MAX_NICE, is_nice
from runtime.decode_guard import DecodeGuard
from runtime.health_list import ListingHealthServicer
from runtime.heap import settle_heap
from runtime.keepalive import SERVER_OPTIONS
from runtime.settle_calls import settle_calls
from runtime.telemetry import Telemetry
from runtime.tls import TlsConfig

log = logging.getLogger(__name__)

MiB = 1 << 20
_FINAL_GRACE_S = 0.5  # for unary calls still answering once the hosted service drained
_SETTLE_S = 1.0  # for the tasks of the calls a stop cancelled to end


@dataclass(frozen=True)
class ServerConfig:
    """Where and how a service listens.

    host: 127.0.0.1 by default; a service is exposed deliberately (compose sets 0.0.0.0).
    port: 0 picks a free port (the bound one is returned by start()).
    max_message_bytes: send and receive limit; gRPC's 4 MiB default is too small
        for one inline tensor batch.
    grace_s: how long a graceful stop waits for in-flight work.
    torch_threads: intra-op threads; one per process by default because a host runs
        many service processes and oversubscribed BLAS threads slow all of them.
    nice: the process's CPU priority increment (0..19, as nice(1)): on a host whose cores
        a pipeline's services share, the stages further from the client yield to those
        nearer it, so work already under way reaches the client first.
    ready_poll_s: how often readiness is checked until the service is SERVING.
    tls: the port serves TLS (mutual TLS when it has a CA: runtime/tls.py); None: plaintext.
    """

    host: str = "127.0.0.1"
    port: int = 0
    max_message_bytes: int = 64 * MiB
    grace_s: float = 5.0
    torch_threads: int = 1
    nice: int = 0
    ready_poll_s: float = 0.05
    tls: TlsConfig | None = None

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("server.host is empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"server.port must be in [0, 65535], got {self.port}")
        if self.max_message_bytes < 4 * MiB:
            raise ValueError(f"server.max_message_bytes must be >= 4 MiB, got {self.max_message_bytes}")
        if self.grace_s < 0:
            raise ValueError(f"server.grace_s must be >= 0, got {self.grace_s}")
        if self.torch_threads < 1:
            raise ValueError(f"server.torch_threads must be >= 1, got {self.torch_threads}")
        if not is_nice(self.nice):
            raise ValueError(f"server.nice must be an int in [0, {MAX_NICE}], got {self.nice!r}")
        if self.ready_poll_s <= 0:
            raise ValueError(f"server.ready_poll_s must be > 0, got {self.ready_poll_s}")
        if self.tls is not None and not self.tls.has_identity:
            raise ValueError("server.tls needs a certificate and key (--tls-cert, --tls-key)")

    def grpc_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            # a port another process listens on fails to bind, rather than splitting
            # connections between two servers (gRPC sets SO_REUSEPORT by default)
            ("grpc.so_reuseport", 0),
            # pings from the mesh's channels are welcome; stopped clients are found (runtime/keepalive.py)
            *SERVER_OPTIONS,
        ]


class HostedService(Protocol):
    """What a GrpcServer hosts (a component service, the conductor)."""

    service_names: tuple[str, ...]  # full gRPC names: health and reflection list them

    def register(self, server: grpc.aio.Server) -> None:
        """Adds the servicers to `server` (called once, before it starts)."""

    def start(self) -> None:
        """Starts background machinery (an engine thread), inside the server's loop."""

    def ready(self) -> bool:
        """True once it can serve: health turns SERVING."""

    async def drain(self, timeout_s: float) -> None:
        """Stops taking new work and waits (at most timeout_s) for in-flight work."""

    def close(self) -> None:
        """Releases everything (engine, arena); called after the server stopped."""

    # Optional: bind_health(set_status) -- called once before start() with a function
    # set_status(name, is_serving) that sets a health name of its own (the conductor's
    # per-model health); ignored once a graceful stop began.
    # Optional: `server_interceptors`, a sequence of grpc.aio.ServerInterceptor run before
    # the telemetry ones (the conductor's token check); GrpcServer reads it with a default.
    # Optional: `event_loop`, the loop it runs on unless STARMESH_EVENT_LOOP says otherwise
    # (core.event_loop): "uvloop" for the conductor, which only moves messages; "asyncio"
    # without it (a component service, beside its engine thread).


class GrpcServer:
    """One grpc.aio server hosting one service. Create and use it inside one event loop."""

    def __init__(self, hosted: HostedService, config: ServerConfig, telemetry: Telemetry | None = None) -> None:
        self.hosted = hosted
        self.config = config
        self.telemetry = telemetry
        self.port: int | None = None
        self.health = ListingHealthServicer()
        self._server: grpc.aio.Server | None = None
        self._watcher: asyncio.Task | None = None
        self._serving = asyncio.Event()
        self._stopped = False
        self._health_sets: set[asyncio.Task] = set()

    async def start(self) -> int:
        """Binds, starts serving (NOT_SERVING until ready) and returns the bound port."""
        # The decode guard first (a request that does not decode is INVALID_ARGUMENT), then
        # the hosted service's own (the token check: a refused call costs no span).
        interceptors = [DecodeGuard(), *getattr(self.hosted, "server_interceptors", ()),
                        *(self.telemetry.server_interceptors() if self.telemetry else [])]
        server = grpc.aio.server(interceptors=interceptors, options=self.config.grpc_options())
        self.hosted.register(server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        names = (*self.hosted.service_names, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, server)
        address = f"{self.config.host}:{self.config.port}"
        tls = self.config.tls
        if tls is None:
            self.port = server.add_insecure_port(address)
        else:
            self.port = server.add_secure_port(address, tls.server_credentials())
        if not self.port:
            raise OSError(f"could not bind {address}")
        for name in ("", *self.hosted.service_names):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.start()
        self._server = server
        bind = getattr(self.hosted, "bind_health", None)
        if bind is not None:
            bind(self._set_health)
        self.hosted.start()
        self._watcher = asyncio.create_task(self._watch_ready())
        log.info("listening on %s:%d (%s, %s)", self.config.host, self.port, _security(self.config.tls),
                 event_loop.name(asyncio.get_running_loop()))
        return self.port

    def _set_health(self, name: str, is_serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if is_serving else health_pb2.HealthCheckResponse.NOT_SERVING
        task = asyncio.get_running_loop().create_task(self.health.set(name, status))
        self._health_sets.add(task)  # held until done: a bare task may be collected early
        task.add_done_callback(self._health_sets.discard)

    async def _watch_ready(self) -> None:
        # Readiness is a plain bool (weights loading on another thread); polling it
        # briefly at startup keeps the hosted-service interface free of callbacks.
        while not self._is_ready():
            await asyncio.sleep(self.config.ready_poll_s)
        for name in ("", *self.hosted.service_names):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._serving.set()

    def _is_ready(self) -> bool:
        try:
            return bool(self.hosted.ready())
        except Exception:
            log.exception("readiness check failed")
            return False

    async def wait_serving(self, timeout_s: float | None = None) -> None:
        await asyncio.wait_for(self._serving.wait(), timeout_s)

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful stop: NOT_SERVING, drain, stop the server, close the hosted service."""
        if self._stopped:
            return
        self._stopped = True
        if self._server is None:  # start() failed or never ran: still release the arena
            self.hosted.close()
            return
        grace = self.config.grace_s if grace_s is None else grace_s
        deadline = time.monotonic() + grace
        if self._watcher:
            self._watcher.cancel()
        await self.health.enter_graceful_shutdown()
        try:
            await self.hosted.drain(grace)
        except Exception:
            log.exception("draining failed")
        # In-flight work is done (or the grace period is over). What still runs are
        # long-lived streams that never end by themselves (idle Run streams, health
        # watches): a short grace lets in-flight unary calls answer, then they are
        # cancelled, which fails exactly the requests they still carry.
        await self._server.stop(min(_FINAL_GRACE_S, max(0.0, deadline - time.monotonic())))
        await settle_calls(_SETTLE_S)
        try:
            self.hosted.close()
        finally:
            if self.telemetry:
                self.telemetry.shutdown()
        log.info("stopped")

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


def _security(tls: TlsConfig | None) -> str:
    if tls is None:
        return "plaintext"
    return "mutual TLS" if tls.ca else "TLS"


def configure_torch(num_threads: int) -> None:
    """Sets torch's intra-op threads for this process (imports torch: engine processes only)."""
    import torch

    if torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)


def configure_priority(nice: int) -> None:
    """Lowers this process's CPU priority by `nice`. Linux keeps a priority per thread and
    a new thread inherits its maker's, so this runs before the server's threads start;
    the few already there (torch's, from its import) are lowered alike."""
    if not nice:
        return
    value = os.nice(nice)
    tasks = f"/proc/{os.getpid()}/task"
    for tid in os.listdir(tasks) if os.path.isdir(tasks) else ():
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), value)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


async def serve(
    hosted: HostedService,
    config: ServerConfig,
    telemetry: Telemetry | None = None,
    on_serving: Callable[[int], Awaitable[None] | None] | None = None,
) -> None:
    """Runs a service until SIGTERM or SIGINT, then stops gracefully.

    `on_serving(port)` runs once health is SERVING (the CLI writes --port-file there).
    Must run in the main thread (signal handlers).
    """
    configure_torch(config.torch_threads)
    server = GrpcServer(hosted, config, telemetry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        port = await server.start()
        serving = asyncio.create_task(server.wait_serving())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        serving.cancel()
        if serving.done() and not serving.cancelled():
            settle_heap()  # built and serving: what exists now lives as long as the process
            result = on_serving(port) if on_serving is not None else None
            if asyncio.iscoroutine(result):
                await result
        await stopping
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await server.stop()


def serve_blocking(hosted: HostedService, config: ServerConfig, telemetry: Telemetry | None = None,
                   port_file: str | None = None) -> None:
    """serve() in a fresh event loop until SIGTERM or SIGINT; the bound port goes to
    `port_file` once SERVING (what runtime.process.ServiceProcess waits for)."""
    from runtime.process import write_port_file

    on_serving = (lambda port: write_port_file(port_file, port)) if port_file else None
    event_loop.run(serve(hosted, config, telemetry, on_serving=on_serving), getattr(hosted, "event_loop", "asyncio"))
