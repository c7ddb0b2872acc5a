"""One executor's Run streams to replicas, endpoint -> RemoteTarget, growing and
shrinking with membership (conductor/membership.py).

A replica that joins gets its stream before the replica selector may choose it; one
that leaves keeps its stream while any open request reached it (so the requests there
finish, or fail cleanly when it dies), and `sweep` closes it once none does.
"""
from __future__ import annotations

from typing import Iterable

from conductor.targets import RemoteTarget


class ReplicaTargets:
    """max_message_bytes, tls: what every RemoteTarget is made with."""

    def __init__(self, max_message_bytes: int = 64 << 20, tls=None) -> None:
        self._args = (max_message_bytes, tls)
        self._sink = None
        self._targets: dict[str, RemoteTarget] = {}
        self._leaving: set[str] = set()

    def bind(self, sink, endpoints: Iterable[str]) -> None:
        """The executor's sink, and the streams known at start (opened by `start`)."""
        self._sink = sink
        for endpoint in endpoints:
            self._targets.setdefault(endpoint, self._make(endpoint))

    def _make(self, endpoint: str) -> RemoteTarget:
        max_message_bytes, tls = self._args
        return RemoteTarget(endpoint, self._sink, max_message_bytes, tls)

    def __getitem__(self, endpoint: str) -> RemoteTarget:
        return self._targets[endpoint]

    def __contains__(self, endpoint: str) -> bool:
        return endpoint in self._targets

    def values(self):
        return self._targets.values()

    async def start(self) -> None:
        for target in self._targets.values():
            await target.start()

    async def add(self, endpoint: str) -> None:
        """A stream to a replica that joined (kept when it is already open)."""
        self._leaving.discard(endpoint)
        if endpoint not in self._targets:
            target = self._make(endpoint)
            self._targets[endpoint] = target
            await target.start()

    def leave(self, endpoint: str) -> None:
        """The replica left: its stream closes at the first sweep no request needs it."""
        if endpoint in self._targets:
            self._leaving.add(endpoint)

    async def sweep(self, in_use: set[str]) -> list[str]:
        """Closes the streams of replicas that left and that no open request reached
        (`in_use`: endpoints the open requests reached); returns the endpoints closed."""
        closed = sorted(e for e in self._leaving if e not in in_use)
        for endpoint in closed:
            self._leaving.discard(endpoint)
            await self._targets.pop(endpoint).close()
        return closed

    async def close(self) -> None:
        targets, self._targets = list(self._targets.values()), {}
        self._leaving.clear()
        for target in targets:
            await target.close()
