"""Per-stream batches of outbound events: one delivery per engine iteration.

The engine thread emits events as it handles items and steps; `flush()` hands
each stream everything of this iteration at once, so one engine step costs one
RunResponse per stream. A half-closed stream is ended (its
sink gets None) once it carries no open node run.
"""
from __future__ import annotations

import logging
from typing import Callable

from runtime.items import OutboundEvent

log = logging.getLogger(__name__)

# Called on the engine thread, must not block: a batch of events, or None = end the stream.
Sink = Callable[[list[OutboundEvent] | None], None]


class Outbox:
    """Engine-thread only; no locks."""

    def __init__(self) -> None:
        self._sinks: dict[str, Sink] = {}
        self._pending: dict[str, list[OutboundEvent]] = {}
        self._finishing: set[str] = set()  # half-closed streams, ended once their runs end

    def attach(self, stream_id: str, sink: Sink) -> None:
        self._sinks[stream_id] = sink

    def detach(self, stream_id: str) -> None:
        self._sinks.pop(stream_id, None)
        self._pending.pop(stream_id, None)
        self._finishing.discard(stream_id)

    def finish(self, stream_id: str) -> None:
        if stream_id in self._sinks:
            self._finishing.add(stream_id)

    def emit(self, stream_id: str, event: OutboundEvent) -> None:
        if stream_id in self._sinks:  # a detached stream has nobody to tell
            self._pending.setdefault(stream_id, []).append(event)

    def flush(self, has_runs: Callable[[str], bool]) -> None:
        """Delivers this iteration's batches, then ends finished half-closed streams."""
        pending, self._pending = self._pending, {}
        for stream_id, events in pending.items():
            self._deliver(stream_id, events)
        for stream_id in [s for s in self._finishing if not has_runs(s)]:
            self._finishing.discard(stream_id)
            self._deliver(stream_id, None)

    def _deliver(self, stream_id: str, events: list[OutboundEvent] | None) -> None:
        sink = self._sinks.get(stream_id)
        if sink is None:
            return
        try:
            sink(events)
        except Exception:  # e.g. the stream's event loop already closed at shutdown
            log.exception("delivering to stream %s failed", stream_id)
