"""The engine thread's inbox: messages from the event loop, and whether all is quiet.

`put` never blocks (the grpc.aio event loop calls it). The engine thread takes messages
with `get` (blocking, when its component has nothing to do) or `next_nowait`, and calls
`handled()` once per message it finished. Idle means: every message put has been
handled and the caller says no node run is open (`update_idle(has_runs)`).
"""
from __future__ import annotations

import queue
import threading
from typing import Any


class Inbox:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0  # messages put and not yet handled (guarded by _lock)
        self._idle = threading.Event()
        self._idle.set()

    def put(self, msg: Any) -> None:
        with self._lock:
            self._pending += 1
            if self._idle.is_set():  # Event.clear takes the event's own lock: only when it changes
                self._idle.clear()
        self._queue.put(msg)

    @property
    def num_pending(self) -> int:
        return self._pending  # one int read: a momentary view without the lock

    def get(self) -> Any:
        return self._queue.get()

    def next_nowait(self) -> Any:
        """The next message, or None when there is none."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def handled(self) -> None:
        with self._lock:
            self._pending -= 1

    def update_idle(self, has_runs: bool) -> None:
        """Called once per engine iteration: the event changes (set takes its lock and
        wakes its waiters) only when idleness begins, not on every quiet iteration."""
        if has_runs or self._pending or self._idle.is_set():  # unlocked reads: a quick no
            return
        with self._lock:
            if self._pending == 0:
                self._idle.set()

    def set_idle(self) -> None:
        """Everything left is abandoned (the thread stops): waiters are released."""
        with self._lock:
            self._pending = 0
        self._idle.set()

    def wait_idle(self, timeout: float | None) -> bool:
        return self._idle.wait(timeout)
