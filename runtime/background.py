"""Run a `GrpcServer` on a background thread with its own event loop.

For tests and tools that host services in-process:

    with BackgroundServer(ComponentService(component, transport), ServerConfig()) as srv:
        stub = ComponentStub(grpc.insecure_channel(srv.address))

start() returns once the server is bound (and SERVING unless wait_serving=False);
stop() is the same graceful stop as SIGTERM: drain, stop, close the hosted service.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from core import event_loop
from runtime.server import GrpcServer, HostedService, ServerConfig
from runtime.telemetry import Telemetry


class BackgroundServer:
    def __init__(
        self, hosted: HostedService, config: ServerConfig | None = None, telemetry: Telemetry | None = None
    ) -> None:
        self.hosted = hosted
        self.config = config or ServerConfig()
        self.telemetry = telemetry
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: GrpcServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    def start(self, timeout_s: float = 30.0, wait_serving: bool = True) -> int:
        """Starts the thread and the server; returns the bound port."""
        loop = event_loop.new_event_loop(getattr(self.hosted, "event_loop", "asyncio"))
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="grpc-server", daemon=True)
        self._thread.start()
        try:
            self.port = self._call(self._start(wait_serving, timeout_s), timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.port

    async def _start(self, wait_serving: bool, timeout_s: float) -> int:
        self._server = GrpcServer(self.hosted, self.config, self.telemetry)
        port = await self._server.start()
        if wait_serving:
            await self._server.wait_serving(timeout_s)
        return port

    def stop(self, grace_s: float | None = None, timeout_s: float = 60.0) -> None:
        """Graceful stop; then ends the loop thread. Safe to call twice."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            server = self._server
            if server is not None:
                self._call(server.stop(grace_s), timeout_s, loop)
            else:
                self.hosted.close()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout_s)
            loop.close()

    def _call(self, coro, timeout_s: float, loop: asyncio.AbstractEventLoop | None = None):
        future: concurrent.futures.Future = asyncio.run_coroutine_threadsafe(coro, loop or self._loop)
        return future.result(timeout_s)

    def __enter__(self) -> "BackgroundServer":
        if self.port is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
