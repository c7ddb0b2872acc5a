"""Replicas that come and go: each dns service's name is resolved every `refresh_s`, and
what changed between two answers becomes joins and leaves.

    membership = Membership({"thinker": DnsReplicas("thinker.mesh.svc:50061")}, on_join, on_leave, on_tick)
    membership.start()          # in the conductor's event loop
    ...
    await membership.close()

on_join(service, endpoint) (awaited): the conductor opens a stream to it and watches its
health; it takes requests once its health watch says SERVING. on_leave(service,
endpoint): the conductor drains it (no new requests; the open ones finish there or fail
if it dies). on_tick() (awaited) after every round: streams of drained replicas close.
A resolver that fails (the DNS server does not answer) changes nothing: a replica is
never drained because a lookup failed, only because the name stopped listing it.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Mapping

from conductor.dns_replicas import DnsReplicas

log = logging.getLogger(__name__)

OnJoin = Callable[[str, str], Awaitable[None]]
OnLeave = Callable[[str, str], None]


class Membership:
    """sources: service -> DnsReplicas; `members` is the latest view per service."""

    def __init__(self, sources: Mapping[str, DnsReplicas], on_join: OnJoin, on_leave: OnLeave,
                 on_tick: Callable[[], Awaitable[None]] | None = None) -> None:
        self.sources = dict(sources)
        self.members: dict[str, tuple[str, ...]] = dict.fromkeys(self.sources, ())
        self.num_rounds = dict.fromkeys(self.sources, 0)
        self._on_join, self._on_leave, self._on_tick = on_join, on_leave, on_tick
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._follow(service), name=f"membership-{service}")
                       for service in self.sources]

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, service: str) -> None:
        source = self.sources[service]
        while True:
            try:
                await self.refresh(service)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a failed round is retried at the next
                log.warning("membership of %s (%s): %s: %s", service, source.dns, type(e).__name__, e)
            await asyncio.sleep(source.refresh_s)

    async def refresh(self, service: str) -> None:
        """One round for `service`: resolve, join what appeared, drain what went."""
        try:
            now = await self.sources[service].resolve()
        except OSError as e:
            log.warning("membership of %s: resolving %s failed (%s); keeping %d replica(s)",
                        service, self.sources[service].dns, e, len(self.members[service]))
            now = self.members[service]
        before = self.members[service]
        for endpoint in before:
            if endpoint not in now:
                log.info("replica %s left service %s", endpoint, service)
                self._on_leave(service, endpoint)
        for endpoint in now:
            if endpoint not in before:
                log.info("replica %s joined service %s", endpoint, service)
                await self._on_join(service, endpoint)
        self.members[service] = now
        self.num_rounds[service] += 1
        if self._on_tick is not None:
            await self._on_tick()
