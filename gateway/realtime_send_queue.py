"""What a Realtime connection has yet to send its client, bounded by bytes.

Events are put without waiting (the conductor's stream is never held up by one client)
and a sender task writes them to the socket, whose writes wait while the client does not
read. A client that stops reading lets the queue fill: past `max_bytes` the put raises
ClientNotReading and the connection closes, dropping what was queued and its session
(the conductor frees the session's state when its stream ends), so a stalled client
holds at most `max_bytes` here and nothing in the mesh.

    queue = SendQueue(8 << 20)
    queue.put(json_text)            # ClientNotReading past the bound
    text = await queue.get()        # None once closed
"""
from __future__ import annotations

import asyncio
import collections


class ClientNotReading(Exception):
    pass


class SendQueue:
    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1024:
            raise ValueError(f"realtime send queue max_bytes must be >= 1024, got {max_bytes}")
        self.max_bytes = max_bytes
        self.num_bytes = 0
        self._items: collections.deque[str | None] = collections.deque()
        self._ready = asyncio.Event()

    def put(self, text: str) -> None:
        if self.num_bytes + len(text) > self.max_bytes:
            raise ClientNotReading(f"the client has not read {self.num_bytes} bytes of events (the bound is "
                                   f"{self.max_bytes})")
        self.num_bytes += len(text)
        self._items.append(text)
        self._ready.set()

    def close(self) -> None:
        """get() returns None once what was put before is sent."""
        self._items.append(None)
        self._ready.set()

    async def get(self) -> str | None:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        text = self._items.popleft()
        if text is not None:
            self.num_bytes -= len(text)
        return text
