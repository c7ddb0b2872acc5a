"""The host weight cache's writer lock: a kernel `flock` with a bounded wait.

Ownership is the open file description, not a PID: a writer that dies releases the
lock with its last descriptor, so a lock file left behind is never mistaken for a live
writer. Only the lock owner may delete a key's temporaries (`.tmp-<key>-*`): whoever
wrote them is gone, or it would still hold the lock.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

POLL_S = 0.02


class LockTimeout(TimeoutError):
    pass


@contextmanager
def writer_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """Holds an exclusive flock on `path` (created if missing) for the block, or raises
    LockTimeout after timeout_s."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"{path}: another process held the writer lock for more than {timeout_s}s")
                time.sleep(POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def temp_prefix(key: str) -> str:
    return f".tmp-{key}-"


def remove_stale_temps(root: Path, key: str) -> list[str]:
    """Deletes the key's temporaries; call only while holding the key's writer lock."""
    removed = []
    for entry in root.glob(temp_prefix(key) + "*"):
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed
