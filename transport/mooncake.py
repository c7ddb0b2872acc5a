"""Mooncake transfer engine over this process's arena (TCP here, RDMA where present).

The whole arena is registered once; a consumer on another host reads a lease's
header and bytes with one transfer into a lease of its own registered arena.
"""
from __future__ import annotations

import logging
import os
import shutil

from core.errors import PeerUnavailable, TransportError

log = logging.getLogger(__name__)


def _missing_system_library_hint() -> str:
    if shutil.which("dpkg") is None:
        return ""
    who = "" if os.geteuid() == 0 else "sudo "
    return f" Install the system libraries with: {who}apt-get install -y libibverbs1 libnuma1"


def load_engine_class():
    """Imports mooncake lazily: only processes with Mooncake enabled need it."""
    os.environ.setdefault("GLOG_minloglevel", "3")  # Mooncake logs every handshake otherwise; our errors say what failed
    try:
        from mooncake.engine import TransferEngine
    except ImportError as e:
        raise TransportError(
            f"Mooncake transport is enabled but mooncake.engine cannot be imported ({e}). "
            "Install the extra: pip install 'starmesh[mooncake]'." + _missing_system_library_hint()
        ) from e
    return TransferEngine


class MooncakeEndpoint:
    """One transfer engine per process, P2P handshake (no metadata server)."""

    def __init__(self, hostname: str, base_address: int, nbytes: int, protocol: str = "tcp") -> None:
        self.engine = load_engine_class()()
        rc = self.engine.initialize(hostname, "P2PHANDSHAKE", protocol, "")
        if rc != 0:
            raise TransportError(f"Mooncake initialize({hostname!r}, {protocol!r}) failed with {rc}")
        self.session = f"{hostname}:{self.engine.get_rpc_port()}"
        self.base_address = base_address
        self.nbytes = nbytes
        rc = self.engine.register_memory(base_address, nbytes)
        if rc != 0:
            raise TransportError(f"Mooncake register_memory of the arena ({nbytes} bytes) failed with {rc}")

    def read(self, session: str, local_address: int, remote_address: int, nbytes: int) -> None:
        """Synchronous read of `nbytes` from a peer into our registered memory."""
        rc = self.engine.transfer_sync_read(session, local_address, remote_address, nbytes)
        if rc != 0:
            raise PeerUnavailable(
                f"Mooncake read of {nbytes} bytes from {session} (mooncake.address {remote_address:#x}) "
                f"failed with {rc}: the producer is gone or the address is not registered there"
            )

    def close(self) -> None:
        try:
            self.engine.unregister_memory(self.base_address)
        except Exception:  # best effort at shutdown
            log.debug("mooncake unregister failed", exc_info=True)
        self.engine = None
