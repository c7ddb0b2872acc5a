"""Which requests and replicas went quiet: what `Executor.check_liveness` acts on.

Every Run stream of a replica lists, each second, the requests the replica holds on it
(runtime/heartbeat.py). Two rules read those heartbeats:

- a request that a replica it was sent to has not listed for `run_timeout_s` was dropped
  there (a bug, a foreign Cancel): it fails alone;
- a replica that has sent nothing at all on a stream for `silence_s` while it holds a
  request there is hung (stopped, its event loop stuck): every request on it fails, and
  it is marked down until it answers its health watch again.

Time is the conductor's monotonic clock, with one correction: a stall of the conductor's
own event loop is held against no one. What replicas sent during a stall is still queued,
unread, when the loop comes back, and the liveness check may run before the readers do;
so every stamp moves on by the stall (`forgive_stall`, measured by how late the periodic
check came). A heartbeat is judged by when it could have been read, not by when the check
happened to look.
"""
from __future__ import annotations

import time
from typing import Any, Iterable

from core.errors import InvalidArgument

DEFAULT_SILENCE_S = 4.0  # four missed heartbeats of the default 1 s interval
CHECKS_PER_TIMEOUT = 16  # the check runs this often per silence_s (or run_timeout_s, the shorter)
MIN_STALL_S = 0.1  # lateness below this is scheduling noise, not a stall worth moving stamps for


class Liveness:
    """run_timeout_s: a request unlisted this long fails; silence_s: a replica that says
    nothing this long while it holds requests is hung. `heard`: target name -> when its
    stream last delivered anything (monotonic seconds)."""

    def __init__(self, run_timeout_s: float, silence_s: float = DEFAULT_SILENCE_S) -> None:
        for name, value in (("run_timeout_s", run_timeout_s), ("silence_s", silence_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgument(f"executor {name} must be a number > 0, got {value!r}")
        self.run_timeout_s = float(run_timeout_s)
        self.silence_s = float(silence_s)
        self.interval_s = min(self.run_timeout_s, self.silence_s) / CHECKS_PER_TIMEOUT
        self.heard: dict[str, float] = {}
        self._last_check = time.monotonic()  # a stall before the first check is forgiven too

    def heard_from(self, name: str, now: float) -> None:
        self.heard[name] = now

    def forgive_stall(self, runs: Iterable[Any], now: float) -> float:
        """Moves every stamp on by how much later than `interval_s` after the previous call
        this one comes (the event loop was stalled meanwhile); returns that stall."""
        last, self._last_check = self._last_check, now
        stall = now - last - self.interval_s
        if stall < MIN_STALL_S:
            return 0.0
        for run in runs:
            for name, t in run.seen.items():
                run.seen[name] = min(t + stall, now)  # a beat read after the stall stays at most "now"
        for name, t in self.heard.items():
            self.heard[name] = min(t + stall, now)
        return stall

    def silent(self, runs: Iterable[Any], now: float) -> dict[str, tuple[Any, float]]:
        """name -> (target, seconds quiet) of every replica that holds an open request and
        has sent nothing since it got it, or since its last message, for silence_s."""
        since: dict[str, tuple[Any, float]] = {}
        for run in runs:
            for name, t in run.seen.items():
                quiet_from = max(t, self.heard.get(name, t))
                if name not in since or quiet_from < since[name][1]:
                    since[name] = (run.reached[name], quiet_from)
        return {name: (target, now - t) for name, (target, t) in since.items() if now - t > self.silence_s}

    def stale(self, runs: Iterable[Any], now: float) -> list[tuple[Any, str]]:
        """(run, replica name) of every open request a replica has not listed for run_timeout_s."""
        out = []
        for run in runs:
            stale = [name for name, t in run.seen.items() if now - t > self.run_timeout_s]
            if stale:
                out.append((run, stale[0]))
        return out
