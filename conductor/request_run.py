"""Per-request state on the conductor, in one object."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from conductor.walk_state import WalkState

END = object()  # end marker on a request's client queue


@dataclass
class Failure:
    status: str   # grpc.StatusCode name
    message: str


@dataclass
class RequestRun:
    """A request's walk state, the targets it reached (to cancel/clean up there) and
    the queue of events for its client. Invariant: `state` is None once finished."""

    request_id: str
    inputs: dict[str, tuple]
    params: dict[str, Any]
    walk: str
    state: WalkState | None
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    reached: dict[str, Any] = field(default_factory=dict)  # target name -> target
    # target name -> when the target last listed the request in its heartbeat (or when
    # it was first sent there); targets without heartbeats (in-process) are not in it
    seen: dict[str, float] = field(default_factory=dict)
    spans: list = field(default_factory=list)  # request span, walk span
    max_backlog: int = 256  # outputs queued for a client that does not read: the bound
    targets: dict = field(default_factory=dict)  # (node, iteration) -> target of that run
    traceparent: str = ""  # the current walk span's W3C context, sent with every run it opens

    def reach(self, target, now: float) -> None:
        """The request was sent to `target`: cancel it there at the end, and expect
        the target's heartbeats to list it from now on."""
        if target.name not in self.reached:
            self.reached[target.name] = target
            if getattr(target, "heartbeats", False):
                self.seen[target.name] = now

    def client_room(self) -> int:
        return self.max_backlog - self.queue.qsize()

    @property
    def is_finished(self) -> bool:
        return self.state is None
