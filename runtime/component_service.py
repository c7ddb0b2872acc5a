"""A component, its transport and its engine thread as one `HostedService`.

    service = ComponentService(component, Transport(TransportConfig()), telemetry)
    await serve(service, ServerConfig(port=50051), telemetry)          # a process
    with BackgroundServer(service, ServerConfig(), telemetry) as srv:  # in a test
        channel = grpc.insecure_channel(srv.address)

The service owns the transport from then on: close() closes it, which unlinks
the arena.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import grpc

from protos.starmesh.v1 import component_pb2, component_pb2_grpc
from runtime.component import Component
from runtime.heartbeat import DEFAULT_INTERVAL_S
from runtime.loop_calls import LoopCalls
from runtime.peer_links import PeerLinks
from runtime.servicer import ComponentServicer
from runtime.step_loop import StepLoop
from runtime.telemetry import Telemetry
from runtime.tls import TlsConfig
from core.version import starmesh_version

log = logging.getLogger(__name__)

_MEMBERS = ("name", "nodes", "open", "push", "cancel", "has_work", "step", "ready", "close")
COMPONENT_SERVICE = component_pb2.DESCRIPTOR.services_by_name["Component"].full_name


class ComponentService:
    """Implements runtime.server.HostedService for one component."""

    service_names = (COMPONENT_SERVICE,)

    def __init__(self, component: Component, transport: Any, telemetry: Telemetry | None = None,
                 tls: TlsConfig | None = None, heartbeat_s: float = DEFAULT_INTERVAL_S,
                 max_message_bytes: int = 64 << 20) -> None:
        """tls: how this process's peer streams (routed edges) connect: its server's config;
        heartbeat_s: how often each Run stream lists the requests it knows (the
        conductor fails a request a replica stopped listing); max_message_bytes: the
        server's message limit (ServerConfig's), which no frame it sends passes."""
        if not heartbeat_s > 0:
            raise ValueError(f"heartbeat_s must be > 0, got {heartbeat_s!r}")
        if not isinstance(component, Component):
            missing = [m for m in _MEMBERS if not hasattr(component, m)]
            raise TypeError(f"{type(component).__name__} is not a component: it lacks {missing}")
        self.component = component
        self.transport = transport
        tracer = telemetry.tracer if telemetry else None
        # Routed edges push straight to peer replicas; the links report back to the engine thread.
        calls = LoopCalls()  # the engine thread's way onto the event loop, shared by both
        self.peers = PeerLinks(f"{component.name} (pid {os.getpid()})", lambda peer, evs: self.step_loop.peer_events(
            peer, evs), lambda peer, why: self.step_loop.peer_broken(peer, why), calls, max_message_bytes, tls=tls)
        self.step_loop = StepLoop(component, transport, tracer, self.peers, loop_calls=calls)
        self.servicer = ComponentServicer(component, transport, self.step_loop, starmesh_version(), heartbeat_s,
                                          max_message_bytes)
        self._closed = False

    def register(self, server: grpc.aio.Server) -> None:
        component_pb2_grpc.add_ComponentServicer_to_server(self.servicer, server)

    def start(self) -> None:
        self.peers.start(asyncio.get_running_loop())
        self.step_loop.start()

    def ready(self) -> bool:
        return bool(self.component.ready())

    async def drain(self, timeout_s: float) -> None:
        self.step_loop.drain()
        # wait_idle blocks: run it off the event loop so streams keep flowing meanwhile.
        if not await asyncio.to_thread(self.step_loop.wait_idle, timeout_s):
            log.warning("grace period of %.1fs ended with work in flight", timeout_s)
        await self.peers.close()

    def close(self) -> None:
        """Stops the engine thread, then closes the component and the transport."""
        if self._closed:
            return
        self._closed = True
        try:
            self.step_loop.stop(timeout=10.0)
            self.peers.cancel()
            self.component.close()
        finally:
            self.transport.close()
