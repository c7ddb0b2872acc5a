"""What `starmesh gateway` runs with, checked once."""
from __future__ import annotations

from dataclasses import dataclass

from gateway.realtime_config import RealtimeConfig

DEFAULT_ADDRESS = "127.0.0.1:8000"


@dataclass(frozen=True)
class GatewayConfig:
    """host, port: where it listens (port 0: any free one); timeout_s: each request's
    deadline at the conductor (504 past it); max_body_bytes: the largest request body
    (413 past it, whatever its framing); max_bodies_in_flight_bytes: the bytes of request
    bodies held at once across all connections (429 past it); body_timeout_s: how long a
    body may take to arrive whole (408 past it); grace_s: how long SIGTERM lets open
    responses finish; realtime: the bounds of a /v1/realtime connection."""

    host: str = "127.0.0.1"
    port: int = 8000
    timeout_s: float = 600.0
    max_body_bytes: int = 32 << 20
    grace_s: float = 10.0
    max_bodies_in_flight_bytes: int = 64 << 20
    body_timeout_s: float = 120.0
    realtime: RealtimeConfig = RealtimeConfig()

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("gateway.host is empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"gateway.port must be in [0, 65535], got {self.port}")
        if not self.timeout_s > 0:
            raise ValueError(f"gateway.timeout_s must be > 0, got {self.timeout_s}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"gateway.max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        if self.max_bodies_in_flight_bytes < self.max_body_bytes:
            raise ValueError(f"gateway.max_bodies_in_flight_bytes must be >= max_body_bytes ({self.max_body_bytes}) "
                             f"so that the largest body can be read, got {self.max_bodies_in_flight_bytes}")
        if not self.body_timeout_s > 0:
            raise ValueError(f"gateway.body_timeout_s must be > 0, got {self.body_timeout_s}")
        if self.grace_s < 0:
            raise ValueError(f"gateway.grace_s must be >= 0, got {self.grace_s}")
