"""A minimal HTTP/1.1 client for the gateway benchmark: one POST per connection, the
request in one write, the chunked response read as it arrives. It measures the server:
what a general-purpose client adds per request (httpx: its own parsing, pool and
task switching) is reported beside it, not mixed in."""
from __future__ import annotations

import asyncio
import json
import time


async def post_stream(host: str, port: int, path: str, body: dict, leave_early: bool = False) -> tuple[float, int]:
    """(seconds to the first body byte, body bytes); leave_early: close after the first."""
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head + data)
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"POST {path}: {status.decode().strip()}: {await reader.read(2000)}")
        while (await reader.readline()) not in (b"\r\n", b""):
            pass  # the headers (a streamed response is chunked)
        first, size = None, 0
        while True:
            length = int((await reader.readline()).strip() or b"0", 16)
            if length == 0:
                return first or 0.0, size
            chunk = await reader.readexactly(length)
            first = first if first is not None else time.perf_counter() - t0
            size += len(chunk)
            await reader.readexactly(2)
            if leave_early:
                return first, size
    finally:
        writer.close()
