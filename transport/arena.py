"""This process's shared-memory arena: a segment, an allocator and leases.

Block layout: [64-byte header][data]. The header (magic, lease id, nbytes) lets a
consumer in another process reject a reference to a lease that was released or
reused, without asking the producer.
"""
from __future__ import annotations

import collections
import ctypes
import struct
import threading
import time
import weakref
from dataclasses import dataclass

from transport.allocator import BlockAllocator
from core.errors import ArenaFull, BadTensorRef, UnknownLease
from transport.segment import OwnedSegment

HEADER = struct.Struct("<QQQQ")  # magic, lease_id, nbytes, reserved
HEADER_BYTES = 64
MAGIC = 0x48534D5241545300  # "\0STARMSH"


@dataclass
class Lease:
    """Bytes of the arena that belong to a request until every consumer acknowledged.

    Freed when pending_acks == 0 and num_pins == 0 (no zero-copy view alive in
    this process), or when its request or carrier stream ends and no view is alive.
    A batch lease (`shares`) belongs to several requests at once: each owes the acks it
    holds a share of, only its own acks count (a foreign one is ignored), its end drops
    its share alone, and the lease is freed once every share is gone. pending_acks is
    then the sum of the shares.
    """

    lease_id: int
    request_id: str
    carrier: str
    block_offset: int
    nbytes: int
    pending_acks: int
    num_pins: int = 0
    shares: dict[str, int] | None = None  # request -> acks it still owes (a batch lease)

    def owns(self, request_id: str) -> bool:
        return request_id in self.shares if self.shares is not None else request_id == self.request_id

    def acknowledge(self, request_id: str | None) -> None:
        """One ack: by `request_id` (ignored unless it owns a share) or, for a
        single-owner lease, by anyone (None)."""
        if self.shares is None:
            if request_id is None or request_id == self.request_id:
                self.pending_acks -= 1
            return
        owed = self.shares.get(request_id, 0) if request_id is not None else 0
        if owed:
            self.shares[request_id] = owed - 1
            if owed == 1:
                del self.shares[request_id]
            self.pending_acks -= 1

    def drop(self, request_id: str | None) -> None:
        """Its request ended (None: its carrier): the acks it owed are void."""
        if self.shares is None or request_id is None:
            self.pending_acks = 0
        else:
            self.pending_acks -= self.shares.pop(request_id, 0)

    @property
    def data_offset(self) -> int:
        return self.block_offset + HEADER_BYTES

    @property
    def is_free_ready(self) -> bool:
        return self.pending_acks <= 0 and self.num_pins == 0


def check_header(mm, data_offset: int, nbytes: int, lease_id: int, arena: str) -> None:
    """Validates a reference against the block header in a mapping of `arena`."""
    if data_offset < HEADER_BYTES or data_offset + nbytes > len(mm):
        raise BadTensorRef(
            f"shm.offset {data_offset} + nbytes {nbytes} is outside arena {arena!r} ({len(mm)} bytes)"
        )
    magic, hdr_lease, hdr_nbytes, _ = HEADER.unpack_from(mm, data_offset - HEADER_BYTES)
    if magic != MAGIC or hdr_lease != lease_id:
        raise UnknownLease(f"shm.lease_id {lease_id} is not live in arena {arena!r} (released or never leased)")
    if hdr_nbytes != nbytes:
        raise BadTensorRef(f"shm.nbytes {nbytes} does not match lease {lease_id} ({hdr_nbytes} bytes)")


class Arena:
    def __init__(self, nbytes: int, shm_dir: str = "/dev/shm", full_wait_s: float = 5.0) -> None:
        self.segment = OwnedSegment(nbytes, shm_dir)
        self.allocator = BlockAllocator(nbytes)
        self.full_wait_s = full_wait_s
        self._cond = threading.Condition()
        self._leases: dict[int, Lease] = {}
        self._next_id = 1
        # Views die on whatever thread drops the last reference (GC); their finalizers
        # only queue the unpin, applied under the lock by the next arena call.
        self._unpins: collections.deque[int] = collections.deque()
        self.base_address = ctypes.addressof(ctypes.c_char.from_buffer(self.segment.mm))

    @property
    def name(self) -> str:
        return self.segment.name

    @property
    def num_leases(self) -> int:
        with self._cond:
            self._apply_unpins()
            return len(self._leases)

    def lease(self, nbytes: int, request_id: str, carrier: str, num_consumers: int = 1,
              shares: dict[str, int] | None = None) -> Lease:
        """Allocates `nbytes`, waiting up to full_wait_s for space, else ArenaFull.
        shares: a batch lease's requests and the acks each owes (request_id: the first)."""
        block = nbytes + HEADER_BYTES
        if block > self.allocator.total:
            raise ArenaFull(f"tensor of {nbytes} bytes exceeds arena {self.name!r} ({self.allocator.total} bytes)")
        deadline = time.monotonic() + self.full_wait_s
        with self._cond:
            self._apply_unpins()
            while not self.allocator.can_allocate(block):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ArenaFull(
                        f"arena {self.name!r} has no room for {nbytes} bytes after {self.full_wait_s}s "
                        f"({self.allocator.used_bytes} of {self.allocator.total} bytes leased)"
                    )
                self._cond.wait(min(left, 0.05))  # short slices: unpins arrive without notify
                self._apply_unpins()
            offset = self.allocator.allocate(block)
            acks = sum(shares.values()) if shares else max(1, num_consumers)
            lease = Lease(self._next_id, request_id, carrier, offset, nbytes, acks, shares=dict(shares) if shares else None)
            self._next_id += 1
            self._leases[lease.lease_id] = lease
            HEADER.pack_into(self.segment.mm, offset, MAGIC, lease.lease_id, nbytes, 0)
            return lease

    def buffer(self, lease: Lease):
        """A writable ctypes view of the lease's data; each one pins the lease while alive."""
        arr = (ctypes.c_char * lease.nbytes).from_buffer(self.segment.mm, lease.data_offset)
        with self._cond:
            lease.num_pins += 1
        weakref.finalize(arr, self._unpins.append, lease.lease_id)
        return arr

    def get(self, lease_id: int) -> Lease:
        with self._cond:
            lease = self._leases.get(lease_id)
        if lease is None:
            raise UnknownLease(f"lease_id {lease_id} is not live in arena {self.name!r}")
        return lease

    def acknowledge(self, lease_ids, request_id: str | None = None) -> None:
        """A consumer is done with these leases; unknown ids are ignored (idempotent)."""
        with self._cond:
            for lease_id in lease_ids:
                lease = self._leases.get(lease_id)
                if lease is not None:
                    lease.acknowledge(request_id)
                    self._maybe_free(lease)

    def release_where(self, request_id: str | None = None, carrier: str | None = None) -> int:
        """Drops the acks still owed for a finished request or a closed carrier stream."""
        with self._cond:
            hits = [
                lease
                for lease in self._leases.values()
                if (request_id is not None and lease.owns(request_id))
                or (carrier is not None and lease.carrier == carrier)
            ]
            for lease in hits:
                lease.drop(request_id if carrier is None or lease.carrier != carrier else None)
                self._maybe_free(lease)
            return len(hits)

    def _apply_unpins(self) -> None:
        while self._unpins:
            lease = self._leases.get(self._unpins.popleft())
            if lease is not None:
                lease.num_pins -= 1
                self._maybe_free(lease)

    def _maybe_free(self, lease: Lease) -> None:
        if not lease.is_free_ready:
            return
        del self._leases[lease.lease_id]
        HEADER.pack_into(self.segment.mm, lease.block_offset, 0, 0, 0, 0)
        self.allocator.free(lease.block_offset)
        self._cond.notify_all()

    def check_integrity(self) -> None:
        with self._cond:
            self._apply_unpins()
            self.allocator.check_integrity()
            assert self.allocator.num_used == len(self._leases), "allocator blocks != live leases"

    def close(self) -> None:
        self.segment.close()
