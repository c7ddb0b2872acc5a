"""The bounds of a /v1/realtime connection, checked once."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RealtimeConfig:
    """max_event_bytes: the largest client event read (a larger one is refused with an
    `error` event, unparsed; past twice this the socket itself refuses the frame and
    closes); max_audio_bytes: the decoded audio of one event (OpenAI allows 15 MiB an
    append); max_send_queue_bytes: events queued for a client that does not read before
    it is disconnected."""

    max_event_bytes: int = 21 << 20
    max_audio_bytes: int = 15 << 20
    max_send_queue_bytes: int = 8 << 20

    def __post_init__(self) -> None:
        if self.max_event_bytes < 1024:
            raise ValueError(f"realtime.max_event_bytes must be >= 1024, got {self.max_event_bytes}")
        if not 2 <= self.max_audio_bytes <= self.max_event_bytes:
            raise ValueError(f"realtime.max_audio_bytes must be in [2, max_event_bytes], got {self.max_audio_bytes}")
        if self.max_send_queue_bytes < 1024:
            raise ValueError(f"realtime.max_send_queue_bytes must be >= 1024, got {self.max_send_queue_bytes}")

    @property
    def max_frame_bytes(self) -> int:
        """What the WebSocket reads at most in one message."""
        return 2 * self.max_event_bytes
