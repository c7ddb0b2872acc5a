"""Serves the gateway app with uvicorn on a socket bound here (port 0 picks a free one),
calls on_ready(port) once it accepts connections (`starmesh gateway` writes its port
file then: how `starmesh up` and the tests wait for it), and stops on SIGTERM / SIGINT: uvicorn stops accepting, lets open
responses finish for `grace_s`, then cancels them (and so their conductor calls).
"""
from __future__ import annotations

import asyncio
import socket

from client.connection import Connection
from core import event_loop
from gateway.app import make_app
from gateway.config import GatewayConfig


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle off (TCP_NODELAY) only on the connections
    # of a socket whose proto says TCP; with Nagle on, a keep-alive client waits ~40 ms (its
    # delayed ACK) for each answer after its first
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def serve(connection: Connection, config: GatewayConfig, on_ready=None) -> None:
    """Blocks until the server stops; a SIGTERM / SIGINT stop returns normally."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        # uvicorn handles the signal, stops gracefully, then raises it again under the
        # handlers it found, so that the process would die by it (exit -15); with these
        # no-op handlers installed first, that second raise does nothing and a graceful
        # stop exits 0, as every service's does
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)
    event_loop.run(_serve(connection, config, on_ready), "uvloop")  # it only moves messages


def uvicorn_config(app, config: GatewayConfig):
    import uvicorn

    return uvicorn.Config(app, loop="asyncio", http="httptools", lifespan="on", access_log=False, log_level="warning",
                          timeout_graceful_shutdown=config.grace_s, ws="websockets-sansio",
                          ws_max_size=config.realtime.max_frame_bytes,
                          ws_per_message_deflate=False)  # audio in base64 barely compresses: no CPU spent on it


async def _serve(connection: Connection, config: GatewayConfig, on_ready) -> None:
    import uvicorn

    sock = bind(config.host, config.port)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(make_app(connection, config), config))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)  # uvicorn has no started event; its startup takes milliseconds
    if server.started and on_ready is not None:
        on_ready(port)
    await task
