"""The conductor's view of its replicas' health: one gRPC `Health.Watch` per replica.

A replica is serving while its watch says SERVING; NOT_SERVING (a draining replica),
a broken watch (a dead process, or a stopped one: keepalive pings go unanswered,
runtime/keepalive.py), a refused connection, or silence on its Run streams while it
holds requests (`suspect`, from conductor.liveness) mark it down at once, and it is
watched again with a capped backoff until it answers (a restarted replica rejoins
without anything else restarting). Each change goes to `on_change(endpoint,
is_serving)`: the replica selectors stop choosing a replica that is down, and the
conductor's per-model health follows. Replicas that join while it runs are watched
from `watch` (down until their first SERVING) and forgotten at `unwatch`.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Iterable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runtime.keepalive import CHANNEL_OPTIONS
from runtime.tls import aio_channel

log = logging.getLogger(__name__)

OnChange = Callable[[str, bool], None]
# A connection of its own per watch: a replica that just restarted is reached without the
# reconnect backoff the failed attempts left on a shared subchannel. Keepalive pings: a
# stopped replica keeps its end of the watch open, and only a missed ping ends it.
_OPTIONS = (("grpc.use_local_subchannel_pool", 1), *CHANNEL_OPTIONS)


class ReplicaHealth:
    """Watches every endpoint until close(); `serving` is the latest view. tls: the mesh's
    runtime.tls.TlsConfig (None: plaintext)."""

    def __init__(self, endpoints: Iterable[str], on_change: OnChange, tls=None,
                 retry_s: float = 0.2, max_retry_s: float = 2.0) -> None:
        if not 0 < retry_s <= max_retry_s:
            raise ValueError(f"health watch retry_s must be in (0, max_retry_s], got {retry_s!r}, {max_retry_s!r}")
        self.serving = dict.fromkeys(sorted(set(endpoints)), True)  # the launcher starts services first
        self._on_change = on_change
        self._tls = tls
        self._retry_s, self._max_retry_s = retry_s, max_retry_s
        self._tasks: dict[str, asyncio.Task] = {}

    def start(self) -> None:
        for endpoint in self.serving:
            self._start_watch(endpoint)

    def _start_watch(self, endpoint: str) -> None:
        self._tasks[endpoint] = asyncio.create_task(self._watch(endpoint), name=f"health-{endpoint}")

    def watch(self, endpoint: str) -> None:
        """Watches a replica that joined (down until it says SERVING); a no-op when watched."""
        if endpoint not in self._tasks:
            self.serving[endpoint] = False
            self._start_watch(endpoint)

    def suspect(self, endpoint: str, why: str) -> None:
        """A replica that went silent on its Run streams (conductor.liveness): down at once,
        and watched again on a new connection, so it is up again only once it answers (a
        hung process keeps its old watch open and quiet); a no-op when not watched."""
        task = self._tasks.get(endpoint)
        if task is None:
            return
        self._set(endpoint, False, why)
        task.cancel()
        self._start_watch(endpoint)

    def unwatch(self, endpoint: str) -> None:
        """Stops watching a replica that left; nothing more is said about it."""
        task = self._tasks.pop(endpoint, None)
        if task is not None:
            task.cancel()
        self.serving.pop(endpoint, None)

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _set(self, endpoint: str, is_serving: bool, why: str) -> None:
        if endpoint not in self._tasks or self.serving.get(endpoint) == is_serving:
            return
        self.serving[endpoint] = is_serving
        (log.info if is_serving else log.warning)("replica %s is %s%s", endpoint,
                                                  "serving" if is_serving else "down", f": {why}" if why else "")
        self._on_change(endpoint, is_serving)

    async def _watch(self, endpoint: str) -> None:
        delay = self._retry_s
        while True:
            try:
                async with aio_channel(endpoint, self._tls, _OPTIONS) as channel:
                    stub = health_pb2_grpc.HealthStub(channel)
                    async for reply in stub.Watch(health_pb2.HealthCheckRequest(service="")):
                        is_serving = reply.status == health_pb2.HealthCheckResponse.SERVING
                        self._set(endpoint, is_serving, health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
                        delay = self._retry_s
                self._set(endpoint, False, "health watch ended")
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as e:
                self._set(endpoint, False, e.code().name)
            except Exception as e:  # noqa: BLE001 - a watch that fails is a replica we cannot vouch for
                self._set(endpoint, False, f"{type(e).__name__}: {e}")
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_retry_s)
