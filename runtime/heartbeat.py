"""Heartbeats of a replica's Run streams: which requests each stream's replica knows.

Every `interval_s` the servicer sends, on each stream, an Alive event listing the
requests known there: those in the request table, and those whose OpenNode or
AcceptRoute is still queued for the engine thread (a long engine step must not make
a request look dropped). The conductor fails a request that a replica it was sent to
stops listing (a foreign Cancel, a bug, a replica that lost it) after its timeout,
instead of leaving it to the request's deadline.

Heartbeats come from the event loop, not the engine thread, so a slow step delays no
beat. They do not prove the engine thread is making progress; only that the replica
still holds the request.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Callable, Iterable

from runtime.items import AcceptRoute, Alive, OpenNode

DEFAULT_INTERVAL_S = 1.0


class QueuedOpens:
    """Requests whose opening items are queued for the engine thread, per stream.

    `queued` runs on the event loop when a batch is submitted, `handled` on the engine
    thread after the batch was handled (its requests are in the table by then, or were
    refused); `snapshot` on the event loop. Keyed by the batch object, which stays
    alive until it is handled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: dict[str, dict[int, frozenset[str]]] = {}  # stream -> id(batch) -> request ids

    def queued(self, stream_id: str, entries: list) -> None:
        ids = frozenset(item.request_id if isinstance(item, OpenNode) else item.run.request_id
                        for _, item in entries if isinstance(item, (OpenNode, AcceptRoute)))
        if ids:
            with self._lock:
                self._batches.setdefault(stream_id, {})[id(entries)] = ids

    def handled(self, stream_id: str, entries: list) -> None:
        with self._lock:
            batches = self._batches.get(stream_id)
            if batches is not None and batches.pop(id(entries), None) is not None and not batches:
                del self._batches[stream_id]

    def forget(self, stream_id: str) -> None:
        with self._lock:
            self._batches.pop(stream_id, None)

    def snapshot(self, stream_id: str) -> frozenset[str]:
        with self._lock:
            return frozenset().union(*self._batches.get(stream_id, {}).values())


def known_requests(queued: QueuedOpens, stream_id: str, table_streams: dict[str, set],
                   wire_id: Callable[[str], str] = str) -> tuple[str, ...]:
    """What a stream's heartbeat lists. Queued ones are read first: a batch leaves the
    queue only after its requests entered the table, so no request falls between the
    two reads. `frozenset(a set)` copies in one step under the GIL, while the engine
    thread may be changing that set. wire_id: a table id -> the id the stream named it by
    (runtime.request_scope)."""
    pending = queued.snapshot(stream_id)
    try:
        in_table = frozenset(table_streams.get(stream_id, ()))
    except RuntimeError:  # changed size while copied (not expected under the GIL): skip a beat
        return tuple(pending)
    return tuple(sorted(pending | {wire_id(r) for r in in_table}))


async def beat(known: Callable[[], Iterable[str]], send: Callable[[Alive], None], interval_s: float) -> None:
    """Sends an Alive every interval_s while the stream's replica knows any request."""
    while True:
        await asyncio.sleep(interval_s)
        ids = tuple(known())
        if ids:
            send(Alive(ids))
