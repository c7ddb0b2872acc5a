"""Mappings of other processes' arenas on this host, opened once and cached."""
from __future__ import annotations

import ctypes
import threading

from transport.arena import check_header
from core.errors import PeerUnavailable
from transport.segment import PeerSegment


class PeerArenas:
    def __init__(self, shm_dir: str = "/dev/shm") -> None:
        self.shm_dir = shm_dir
        self._segments: dict[str, PeerSegment] = {}
        self._lock = threading.Lock()

    def _segment(self, name: str) -> PeerSegment:
        with self._lock:
            seg = self._segments.get(name)
            if seg is None:
                seg = self._segments[name] = PeerSegment(name, self.shm_dir)
            return seg

    def buffer(self, arena: str, data_offset: int, nbytes: int, lease_id: int):
        """Zero-copy ctypes view of a live lease in a live peer's arena.

        Raises PeerUnavailable when the owner died (its cached mapping is dropped),
        UnknownLease / BadTensorRef when the reference does not match the arena.
        """
        seg = self._segment(arena)
        if not seg.is_owner_alive():
            self.forget(arena)
            raise PeerUnavailable(f"the producer owning arena {arena!r} is gone")
        check_header(seg.mm, data_offset, nbytes, lease_id, arena)
        return (ctypes.c_char * nbytes).from_buffer(seg.mm, data_offset)

    def forget(self, arena: str) -> None:
        with self._lock:
            seg = self._segments.pop(arena, None)
        if seg is not None:
            seg.close()

    def close(self) -> None:
        for name in list(self._segments):
            self.forget(name)
