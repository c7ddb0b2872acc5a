"""The Run streams a service keeps to its peer replicas: the data plane of routed edges.

One long-lived stream per peer address, multiplexing every request whose routed edge
goes there (as the conductor's streams do). `post` is called on the engine thread and
never blocks: the batch crosses to the event loop with the engine iteration's other
calls (runtime.loop_calls), where a writer sends it as one RunRequest, with every batch
posted while its last write was under way (a busy link sends fewer, larger messages;
message_split still cuts one over the size limit). What comes back
(credits, refusals) goes to `on_events(peer, events)`; a broken stream goes to
`on_broken(peer, message)` once, and the next post opens a new one (the peer may have
restarted).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from runtime.loop_calls import LoopCalls

log = logging.getLogger(__name__)


class _Link:
    def __init__(self, links: "PeerLinks", peer: str) -> None:
        from runtime.run_client import ComponentClient

        self.links, self.peer = links, peer
        self.queue: asyncio.Queue = asyncio.Queue()
        self.client = ComponentClient(peer, links.max_message_bytes, fresh_connection=True, tls=links.tls)
        self.client.call = self.client.stub.Run()
        self.is_broken = False
        self.tasks = [asyncio.create_task(self._write()), asyncio.create_task(self._read())]

    async def _write(self) -> None:
        from runtime.message_split import oversized_error

        try:
            while True:
                items = await self.queue.get()
                while not self.queue.empty():  # posted while the last write was under way: one message
                    items = items + self.queue.get_nowait()
                too_big = await self.client.send(items, sender=self.links.name)
                if too_big:  # fails those requests, as a refusal from the peer would
                    self.links.on_events(self.peer, [oversized_error(i, self.client.max_message_bytes)
                                                     for i in too_big])
        except Exception as e:  # noqa: BLE001 - any failure breaks the link
            self._break(e)

    async def _read(self) -> None:
        try:
            while True:
                self.links.on_events(self.peer, await self.client.recv())
        except Exception as e:  # noqa: BLE001
            self._break(e)

    def _break(self, exc: BaseException) -> None:
        if self.is_broken or isinstance(exc, asyncio.CancelledError):
            return
        self.is_broken = True
        self.links.forget(self)
        message = getattr(exc, "details", lambda: None)() or str(exc) or type(exc).__name__
        log.warning("peer stream to %s broke: %s", self.peer, message)
        self.links.on_broken(self.peer, message)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        try:
            await self.client.close()
        except Exception:  # noqa: BLE001 - closing a broken stream
            pass


class PeerLinks:
    def __init__(self, name: str, on_events: Callable[[str, list], None], on_broken: Callable[[str, str], None],
                 calls: LoopCalls, max_message_bytes: int = 64 << 20, tls=None) -> None:
        """name: how this process introduces itself on its peer streams (their errors
        name it); on_events and on_broken are called on the event loop; tls: the
        runtime.tls.TlsConfig of the streams (this process's own: peers check it), None
        for plaintext; calls: the engine thread's (its StepLoop's loop_calls)."""
        self.name = name
        self.calls = calls
        self.tls = tls
        self.on_events, self.on_broken = on_events, on_broken
        self.max_message_bytes = max_message_bytes
        self.links: dict[str, _Link] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def post(self, peer: str, items: list) -> None:
        """Engine thread: one RunRequest of `items` to `peer`, in order."""
        if self._loop is None or self._loop.is_closed():
            self.on_broken(peer, "the peer links are not running")
            return
        self.calls.call(self._loop, self._post, peer, items)

    def _post(self, peer: str, items: list) -> None:
        link = self.links.get(peer)
        if link is None:
            log.info("opening a peer stream to %s", peer)
            link = self.links[peer] = _Link(self, peer)
        link.queue.put_nowait(items)

    def forget(self, link: _Link) -> None:
        if self.links.get(link.peer) is link:
            del self.links[link.peer]
        asyncio.ensure_future(link.close())

    async def close(self) -> None:
        links, self.links = list(self.links.values()), {}
        for link in links:
            await link.close()

    def cancel(self) -> None:
        """Synchronous last resort at shutdown: every stream is cancelled."""
        for link in self.links.values():
            for task in link.tasks:
                task.cancel()
            if link.client.call is not None:
                link.client.call.cancel()
        self.links = {}
