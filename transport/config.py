"""Transport configuration (one per process)."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

MODES = ("auto", "inline", "shm", "mooncake")
# A consumer host id meaning "the conductor's client": outputs it reads travel inline
# (the client may run anywhere and maps no arena).
CLIENT_HOST = "client"


def default_host_id() -> str:
    """Host identity for transport selection; containers on one host share it via env."""
    return os.environ.get("STARMESH_HOST_ID") or socket.gethostname()


@dataclass(frozen=True)
class TransportConfig:
    """How this process moves tensor bytes.

    mode: "auto" picks inline below `inline_threshold`, shm when every consumer is on
    this host, Mooncake otherwise (inline when Mooncake is not enabled); the other modes
    force one transport (inline still requires the tensor to fit in a gRPC message).
    """

    host_id: str = field(default_factory=default_host_id)
    mode: str = "auto"
    inline_threshold: int = 64 * 1024
    arena_bytes: int = 1 << 30
    full_wait_s: float = 5.0  # bounded wait for arena space before RESOURCE_EXHAUSTED
    enable_mooncake: bool = False
    mooncake_hostname: str = "127.0.0.1"  # address peers use to reach our transfer engine
    shm_dir: str = "/dev/shm"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"transport.mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "mooncake" and not self.enable_mooncake:
            raise ValueError("transport.mode 'mooncake' needs transport.enable_mooncake")
        if not self.host_id:
            raise ValueError("transport.host_id is empty")
        if self.inline_threshold < 0:
            raise ValueError(f"transport.inline_threshold must be >= 0, got {self.inline_threshold}")
        if self.arena_bytes < 1 << 20:
            raise ValueError(f"transport.arena_bytes must be >= 1 MiB, got {self.arena_bytes}")
        if self.full_wait_s < 0:
            raise ValueError(f"transport.full_wait_s must be >= 0, got {self.full_wait_s}")
