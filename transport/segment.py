"""Shared-memory segments: one /dev/shm file per owner process, mapped with mmap.

Owner liveness is an exclusive `flock` held on the segment for the owner's whole
life (PID namespaces differ between containers that share /dev/shm; a lock does not
care). The kernel drops the lock when the owner dies, however it dies.
"""
from __future__ import annotations

import fcntl
import logging
import mmap
import os
import secrets
import time

from core.errors import UnknownLease

PREFIX = "starmesh-"
log = logging.getLogger(__name__)


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class OwnedSegment:
    """The segment this process owns: created 0600, locked, mapped read/write."""

    def __init__(self, nbytes: int, shm_dir: str = "/dev/shm") -> None:
        self.name = PREFIX + secrets.token_hex(8)
        self.path = os.path.join(shm_dir, self.name)
        # Create under a name the sweep ignores, lock, then rename: a sweeper can never
        # see the final name without its lock held.
        tmp = os.path.join(shm_dir, f".tmp-{self.name}")
        self.fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.ftruncate(self.fd, nbytes)
        os.rename(tmp, self.path)
        self.nbytes = nbytes
        self.mm = mmap.mmap(self.fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.is_unlinked = False

    def unlink(self) -> None:
        """Removes the name; live mappings (ours and peers') stay valid until unmapped."""
        if self.is_unlinked:
            return
        self.is_unlinked = True
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self.unlink()
        try:
            self.mm.close()
        except BufferError:
            pass  # a zero-copy view is still alive somewhere in this process; exit unmaps it
        os.close(self.fd)  # releases the lock


class PeerSegment:
    """Another process's segment, mapped once (cached by the caller) for zero-copy reads.

    Mapped shared and writable so a view is an ordinary tensor; consumers treat
    inputs as read-only by contract.
    """

    def __init__(self, name: str, shm_dir: str = "/dev/shm") -> None:
        if not name.startswith(PREFIX) or "/" in name:
            raise UnknownLease(f"arena {name!r} is not a starmesh segment name")
        try:
            self.fd = os.open(os.path.join(shm_dir, name), os.O_RDWR)
        except FileNotFoundError:
            raise UnknownLease(f"arena {name!r} does not exist on this host") from None
        self.name = name
        self.nbytes = os.fstat(self.fd).st_size
        self.mm = mmap.mmap(self.fd, self.nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def is_owner_alive(self) -> bool:
        """True while the owner holds its exclusive lock (one flock syscall)."""
        if _try_lock(self.fd, fcntl.LOCK_SH):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            return False
        return True

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass
        os.close(self.fd)


def _is_abandoned_tmp(name: str, path: str) -> bool:
    """A creation temp file older than a minute: its creator died between open and rename."""
    if not name.startswith(".tmp-" + PREFIX):
        return False
    try:
        return time.time() - os.stat(path).st_mtime > 60
    except FileNotFoundError:
        return False


def sweep_stale_segments(shm_dir: str = "/dev/shm") -> list[str]:
    """Unlinks starmesh segments whose owner is dead (lock free). Never touches live ones."""
    removed = []
    for name in os.listdir(shm_dir):
        path = os.path.join(shm_dir, name)
        if not name.startswith(PREFIX) and not _is_abandoned_tmp(name, path):
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except (FileNotFoundError, PermissionError):
            continue
        try:
            if _try_lock(fd, fcntl.LOCK_EX):
                os.unlink(path)
                removed.append(name)
        except FileNotFoundError:
            pass  # another sweeper won
        finally:
            os.close(fd)
    if removed:
        log.info("swept %d stale shm segment(s): %s", len(removed), ", ".join(removed))
    return removed
