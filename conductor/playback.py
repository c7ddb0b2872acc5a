"""A stream's playback as its client hears it, on the conductor's clock.

Playback starts when the first audio chunk is sent; each chunk plays right after the
one before it. A chunk sent after the audio before it has finished playing is an
underrun: the player stalls until it arrives, and everything after plays that much
later. So the playback origin (when media position 0 plays; core.pace) is the
request's arrival until the first audio is sent (the first chunk's items are due at
once), then the first chunk's send time, moved later by every stall. `on_audio` says
when it moved: the conductor then re-times the request's work on every service.

ttfa_target_s moves the origin before the first audio to arrival + the target: the
first chunk is then due when the model means it to be heard, not at once. A stream
still ramping is not more urgent than one already playing whose next chunk is due
sooner: with many streams arriving together, the playing ones are fed before their
buffers run dry, and the first chunks of the rest are made within the target.

All times are unix seconds (time.time()), the clock the services compare deadlines to.
"""
from __future__ import annotations

STALL_EPS_S = 0.005  # a stall shorter than this neither counts nor moves the origin (clock noise)


class Playback:
    def __init__(self, sample_rate: int, arrival_s: float, ttfa_target_s: float = 0.0) -> None:
        if sample_rate <= 0:
            raise ValueError(f"playback needs a sample rate > 0, got {sample_rate}")
        if not ttfa_target_s >= 0:
            raise ValueError(f"playback ttfa_target_s must be >= 0, got {ttfa_target_s!r}")
        self.sample_rate = sample_rate
        self.ttfa_target_s = ttfa_target_s
        self.arrival_s = arrival_s
        self.origin_s = arrival_s + ttfa_target_s
        self.first_audio_s: float | None = None  # when the first chunk was sent
        self.play_end_s: float | None = None     # when the audio sent so far finishes playing
        self.delivered_s = 0.0                   # audio sent so far, seconds
        self.underrun_s = 0.0                    # total stall
        self.num_underruns = 0

    def admitted(self, now_s: float) -> None:
        """Its deadlines count from admission (a wait in the queue was not its engines')."""
        self.arrival_s = now_s
        self.origin_s = now_s + self.ttfa_target_s

    def on_audio(self, num_samples: int, now_s: float) -> float | None:
        """A chunk of num_samples was sent at now_s; the new origin when it moved, else None."""
        duration = num_samples / self.sample_rate
        moved = False
        if self.play_end_s is None:
            self.first_audio_s, start, moved = now_s, now_s, True
        elif now_s - self.play_end_s > STALL_EPS_S:
            self.underrun_s += now_s - self.play_end_s
            self.num_underruns += 1
            start, moved = now_s, True
        else:
            start = self.play_end_s
        self.play_end_s = start + duration
        self.delivered_s += duration
        self.origin_s = self.play_end_s - self.delivered_s
        return self.origin_s if moved else None

    @property
    def is_playing(self) -> bool:
        return self.play_end_s is not None

    def lead_s(self, now_s: float) -> float:
        """Audio buffered at the client beyond now (0 before the first chunk, or when stalled)."""
        return max(0.0, self.play_end_s - now_s) if self.play_end_s is not None else 0.0

    def attributes(self) -> dict[str, float | int | bool]:
        """Span attributes of the request's playback (none before any audio)."""
        if self.first_audio_s is None:
            return {}
        return {"starmesh.ttfa_ms": 1e3 * (self.first_audio_s - self.arrival_s),
                "starmesh.audio_s": self.delivered_s, "starmesh.underrun_s": self.underrun_s,
                "starmesh.underruns": self.num_underruns, "starmesh.continuous": self.num_underruns == 0}
