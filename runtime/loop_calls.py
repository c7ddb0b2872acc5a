"""The engine thread's calls onto event loops, handed over in one wake-up per iteration.

Waking an event loop from another thread writes a byte to its self-pipe, and the write
(with the wake-up it causes) costs a few hundred microseconds of the writing thread on
a small VM. One engine iteration may deliver to several Run streams and peer links; a
wake-up each would multiply that cost by the streams touched. Instead:

    calls.call(loop, fn, *args)   # engine thread only: queued, nothing crosses yet
    calls.flush()                 # end of the iteration: one call_soon_threadsafe per loop

The loop then runs the iteration's calls in the order they were queued; a call that
raises is logged and the rest still run. A loop closed meanwhile (shutdown) drops them.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

log = logging.getLogger(__name__)

Call = tuple[Callable[..., Any], tuple]


def _run_all(calls: list[Call]) -> None:
    for fn, args in calls:
        try:
            fn(*args)
        except Exception:  # one failing delivery must not lose the others
            log.exception("a call from the engine thread failed")


class LoopCalls:
    """Engine-thread only; no locks (the loop receives each batch as one callback)."""

    def __init__(self) -> None:
        self._pending: dict[asyncio.AbstractEventLoop, list[Call]] = {}

    def call(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
        self._pending.setdefault(loop, []).append((fn, args))

    @property
    def num_pending(self) -> int:
        return sum(len(calls) for calls in self._pending.values())

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for loop, calls in pending.items():
            try:
                loop.call_soon_threadsafe(_run_all, calls)
            except RuntimeError:  # the loop closed (shutdown): nobody is left to deliver to
                log.debug("dropped %d calls for a closed event loop", len(calls))
