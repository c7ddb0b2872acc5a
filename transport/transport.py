"""The transport of one process: export tensors to references, resolve references."""
from __future__ import annotations

import atexit
import ctypes
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any

from transport.arena import HEADER_BYTES, Arena, check_header
from transport.codec import copy_into, to_bytes, view
from transport.config import CLIENT_HOST, TransportConfig
from transport.dtypes import element_size, from_torch
from core.errors import BadTensorRef
from transport.mooncake import MooncakeEndpoint
from transport.peers import PeerArenas
from transport.refs import ConsumedLease, InlineLocation, MooncakeLocation, ShmLocation, TensorRef
from transport.segment import sweep_stale_segments

log = logging.getLogger(__name__)
LOCAL_CARRIER = "local"  # carrier of receive buffers this process leases for itself
_live: "weakref.WeakSet[Transport]" = weakref.WeakSet()


def live_transports() -> list["Transport"]:
    """Open transports of this process (tests check that their arenas end empty)."""
    return [t for t in _live if not t.is_closed]


@dataclass
class Resolved:
    """A resolved input. `tensor` may be a zero-copy view of shared memory.

    Call `close()` once the consumer is done; then acknowledge `consumed` (a lease of
    another arena, or of our own when producer and consumer share the process).
    """

    tensor: Any
    consumed: ConsumedLease | None = None
    _on_close: Any = field(default=None, repr=False)

    def close(self) -> None:
        self.tensor = None
        if self._on_close is not None:
            self._on_close()
            self._on_close = None


class Transport:
    def __init__(self, config: TransportConfig | None = None) -> None:
        self.config = config or TransportConfig()
        sweep_stale_segments(self.config.shm_dir)
        self.arena = Arena(self.config.arena_bytes, self.config.shm_dir, self.config.full_wait_s)
        self.peers = PeerArenas(self.config.shm_dir)
        self.mooncake: MooncakeEndpoint | None = None
        self.is_closed = False
        atexit.register(self.close)
        _live.add(self)
        if self.config.enable_mooncake:
            try:
                self.mooncake = MooncakeEndpoint(
                    self.config.mooncake_hostname, self.arena.base_address, self.arena.allocator.total
                )
            except Exception:
                self.close()
                raise

    @property
    def host_id(self) -> str:
        return self.config.host_id

    @property
    def arena_name(self) -> str:
        return self.arena.name

    @property
    def mooncake_session(self) -> str | None:
        return None if self.mooncake is None else self.mooncake.session

    # -- producer side -------------------------------------------------------------

    def select(self, nbytes: int, consumer_host_ids=()) -> str:
        """inline | shm | mooncake for a tensor of `nbytes` going to these hosts."""
        mode = self.config.mode
        if nbytes == 0 or mode == "inline" or (mode == "auto" and nbytes < self.config.inline_threshold):
            return "inline"
        if mode != "auto":
            return mode
        if CLIENT_HOST in consumer_host_ids:  # the conductor's client reads values, never memory
            return "inline"
        remote = [h for h in consumer_host_ids if h and h != self.host_id]
        if not remote:
            return "shm"
        # no transfer engine here: the bytes travel in the message, as a client's do (a
        # deployment across hosts without Mooncake still serves, at a message's cost)
        return "inline" if self.mooncake is None else "mooncake"

    def export(self, tensor, *, request_id: str, carrier: str, consumer_host_ids=(),
               shares: dict[str, int] | None = None) -> TensorRef:
        """Makes a reference to `tensor`; a leased copy lives until its consumers acknowledge.
        shares: the tensor is a batch of several requests' items: each request owes the
        acks given (transport.arena.Lease.shares), request_id is the first of them."""
        dtype, shape = from_torch(tensor.dtype), tuple(tensor.shape)
        nbytes = tensor.numel() * element_size(dtype)
        kind = self.select(nbytes, consumer_host_ids)
        if kind == "inline":
            return TensorRef.of_tensor(dtype, shape, InlineLocation(to_bytes(tensor)))
        lease = self.arena.lease(nbytes, request_id, carrier, num_consumers=len(consumer_host_ids), shares=shares)
        copy_into(self.arena.buffer(lease), tensor)
        if kind == "shm":
            loc = ShmLocation(self.arena.name, lease.data_offset, nbytes, lease.lease_id, self.host_id)
        else:
            address = self.arena.base_address + lease.data_offset
            loc = MooncakeLocation(
                self.mooncake.session, address, nbytes, lease.lease_id, self.arena.name, self.host_id
            )
        return TensorRef.of_tensor(dtype, shape, loc)

    def release(self, lease_ids, request_id: str | None = None) -> None:
        """Consumers acknowledged these leases of our arena."""
        self.arena.acknowledge(lease_ids, request_id)

    def release_request(self, request_id: str) -> int:
        return self.arena.release_where(request_id=request_id)

    def release_carrier(self, carrier: str) -> int:
        return self.arena.release_where(carrier=carrier)

    # -- consumer side -------------------------------------------------------------

    def resolve(self, ref: TensorRef, request_id: str = "") -> Resolved:
        loc = ref.location
        if isinstance(loc, InlineLocation):
            return Resolved(view(loc.data, ref.dtype, ref.shape))
        consumed = ConsumedLease(loc.arena, loc.lease_id)
        if isinstance(loc, MooncakeLocation):
            return self._fetch(ref, loc, request_id)
        if loc.host_id != self.host_id:  # never resolvable here: the sender's mistake, not an outage
            raise BadTensorRef(
                f"shm.host_id {loc.host_id!r} is not this host ({self.host_id!r}); "
                "a producer on another host must send Mooncake references"
            )
        if loc.arena == self.arena.name:  # producer and consumer share this process
            lease = self.arena.get(loc.lease_id)
            check_header(self.arena.segment.mm, loc.offset, loc.nbytes, loc.lease_id, loc.arena)
            buf = self.arena.buffer(lease)
        else:
            buf = self.peers.buffer(loc.arena, loc.offset, loc.nbytes, loc.lease_id)
        return Resolved(view(buf, ref.dtype, ref.shape), consumed)

    def _fetch(self, ref: TensorRef, loc: MooncakeLocation, request_id: str) -> Resolved:
        """Reads header + bytes from the producer into a receive lease of our arena."""
        if self.mooncake is None:
            raise BadTensorRef("mooncake reference received but Mooncake is disabled in this process")
        lease = self.arena.lease(HEADER_BYTES + loc.nbytes, request_id, LOCAL_CARRIER)
        try:
            local = self.arena.base_address + lease.data_offset
            self.mooncake.read(loc.session, local, loc.address - HEADER_BYTES, HEADER_BYTES + loc.nbytes)
            buf = self.arena.buffer(lease)
            check_header(buf, HEADER_BYTES, loc.nbytes, loc.lease_id, loc.arena)
        except Exception:
            self.arena.acknowledge([lease.lease_id])
            raise
        data = (ctypes.c_char * loc.nbytes).from_buffer(buf, HEADER_BYTES) if loc.nbytes else b""
        tensor = view(data, ref.dtype, ref.shape)
        return Resolved(tensor, ConsumedLease(loc.arena, loc.lease_id),
                        lambda: self.arena.acknowledge([lease.lease_id]))

    # -- lifecycle -----------------------------------------------------------------

    def stats(self) -> dict:
        num_leases = self.arena.num_leases  # applies pending unpins first
        return {
            "arena": self.arena.name,
            "arena_bytes": self.arena.allocator.total,
            "used_bytes": self.arena.allocator.used_bytes,
            "num_leases": num_leases,
            "num_peer_arenas": len(self.peers._segments),
            "mooncake_session": self.mooncake_session,
        }

    def close(self) -> None:
        """Unlinks the arena and stops Mooncake; idempotent (also runs at exit)."""
        if self.is_closed:
            return
        self.is_closed = True
        atexit.unregister(self.close)
        if self.mooncake is not None:
            self.mooncake.close()
        self.peers.close()
        self.arena.close()
