"""The gateway's listening socket (gateway.server.bind) gives connections with Nagle off:
uvicorn serves it through asyncio's create_server, which sets TCP_NODELAY only on the
connections of a socket that says it is TCP. With Nagle on, each answer after a
keep-alive connection's first waited for the client's delayed ACK (~40 ms on loopback)."""
from __future__ import annotations

import asyncio
import socket

from gateway.server import bind


def test_a_connection_to_the_gateway_socket_has_nagle_off():
    async def accepted_nodelay() -> int:
        loop = asyncio.get_running_loop()
        accepted = loop.create_future()

        class Record(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await loop.create_server(Record, sock=bind("127.0.0.1", 0))  # as uvicorn serves it
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            try:
                return await asyncio.wait_for(accepted, 30)
            finally:
                writer.close()

    assert asyncio.run(accepted_nodelay()) == 1
