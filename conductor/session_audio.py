"""A session's appended audio not yet committed: PCM16 little-endian mono, placed in the
session's whole appended audio (positions in milliseconds, as speech marks give them)."""
from __future__ import annotations

from core.errors import InvalidArgument, ResourceExhausted


class AudioBuffer:
    def __init__(self, sample_rate: int, max_s: float) -> None:
        self.sample_rate = sample_rate
        self.max_samples = int(max_s * sample_rate)
        self.pcm = bytearray()
        self.num_appended = 0          # samples appended over the session

    @property
    def start_ms(self) -> int:
        """Where the buffer's first sample sits in the appended audio."""
        return (self.num_appended - len(self.pcm) // 2) * 1000 // self.sample_rate

    def append(self, data: bytes) -> None:
        if len(data) % 2:
            raise InvalidArgument(f"append_audio has {len(data)} bytes: PCM16 takes 2 bytes a sample")
        if (len(self.pcm) + len(data)) // 2 > self.max_samples:
            raise ResourceExhausted(f"append_audio: the uncommitted audio would pass the session's "
                                    f"{self.max_samples / self.sample_rate:g} s (commit or clear it)")
        self.pcm += data
        self.num_appended += len(data) // 2

    def take(self, from_ms: int | None = None, to_ms: int | None = None) -> bytes:
        """The audio from from_ms (None: the buffer's start) to to_ms (None: its end); what
        was before to_ms leaves the buffer."""
        start, end = self._offset(from_ms, 0), self._offset(to_ms, len(self.pcm))
        out = bytes(self.pcm[start:max(start, end)])
        del self.pcm[:end]
        return out

    def _offset(self, ms: int | None, default: int) -> int:
        if ms is None:
            return default
        samples = (ms - self.start_ms) * self.sample_rate // 1000
        return min(len(self.pcm), max(0, samples * 2))

    def clear(self) -> None:
        self.pcm.clear()
