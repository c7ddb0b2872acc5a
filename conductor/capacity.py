"""Admission by capacity: one model's sustained audio rate, measured from its own streams,
and whether one more stream fits without pushing the admitted ones into underrun.

The rate is measured, not configured: over windows of `window_s` in which the same
streams were in flight and all of them were playing, the audio they were sent per wall
second (engines never idle while they have work, so that is what the deployment
sustains at that many streams: its step times at that batch, on its hardware). An
exponential average is kept per stream count n: rates[n].

A new stream is admitted when the estimate for n + 1 streams covers n + 1 real-time
streams with `headroom` to spare (a starting stream needs more than real time to
fill its first buffers). The estimate fits a step-cost line to the measured loads
(`estimate`). Before any measurement, and with no stream in flight, a stream is
admitted (the admission's max_in_flight still bounds them).
"""
from __future__ import annotations

from dataclasses import dataclass

from conductor.playback import Playback


@dataclass(frozen=True)
class CapacityConfig:
    """The deployment's `admission: {capacity: ...}` keys of a model."""

    enabled: bool = True
    headroom: float = 0.25   # admit while the estimated rate >= streams * (1 + headroom)
    window_s: float = 1.0    # measurement window (several chunks per stream: chunks arrive in bursts)
    smoothing: float = 0.3   # weight of a new window in rates[n]

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"admission.capacity.enabled must be a bool, got {self.enabled!r}")
        if not 0 <= self.headroom <= 10:
            raise ValueError(f"admission.capacity.headroom must be in [0, 10], got {self.headroom!r}")
        if not 0.05 <= self.window_s <= 60:
            raise ValueError(f"admission.capacity.window_s must be in [0.05, 60], got {self.window_s!r}")
        if not 0 < self.smoothing <= 1:
            raise ValueError(f"admission.capacity.smoothing must be in (0, 1], got {self.smoothing!r}")


class Capacity:
    def __init__(self, config: CapacityConfig = CapacityConfig()) -> None:
        self.config = config
        self.streams: list[Playback] = []
        self.rates: dict[int, float] = {}  # streams in flight -> audio seconds per second
        self._window: tuple[float, tuple[int, ...], float] | None = None  # (start, stream ids, audio sent)

    def add(self, playback: Playback) -> None:
        self.streams.append(playback)
        self._window = None

    def remove(self, playback: Playback) -> None:
        if playback in self.streams:
            self.streams.remove(playback)
        self._window = None

    def observe(self, now_s: float) -> bool:
        """Called as audio is sent: closes a window that is due; True when rates changed."""
        if not self.streams or not all(p.is_playing for p in self.streams):
            self._window = None
            return False
        ids, sent = tuple(id(p) for p in self.streams), sum(p.delivered_s for p in self.streams)
        if self._window is None or self._window[1] != ids:
            self._window = (now_s, ids, sent)
            return False
        start, _, sent0 = self._window
        if now_s - start < self.config.window_s:
            return False
        n, rate = len(ids), (sent - sent0) / (now_s - start)
        old = self.rates.get(n)
        self.rates[n] = rate if old is None else old + self.config.smoothing * (rate - old)
        self._window = (now_s, ids, sent)
        return True

    def estimate(self, n: int) -> float | None:
        """Audio seconds per second the deployment sustains at n streams (None: unknown).

        Each stream's wall seconds per audio second grow with the batch: n / rates[n] =
        a + b * n (a: what a step costs whatever its batch, b: what one more stream adds),
        fitted to every measured load by least squares. With one load measured, or a fit
        that says streams are free (b <= 0), all of the cost is taken as per stream
        (a = 0): a lower bound, since batching only ever helps."""
        if not self.rates:
            return None
        points = [(k, k / r) for k, r in self.rates.items() if r > 0]
        if not points:
            return 0.0
        a, b = _fit(points)
        if b <= 0 or a < 0:
            k, y = max(points)
            a, b = 0.0, y / k
        return n / (a + b * n)

    def admits(self, num_in_flight: int) -> bool:
        """Whether one more stream fits beside num_in_flight admitted ones."""
        if not self.config.enabled or num_in_flight == 0:
            return True  # an idle deployment takes a stream whatever it was measured at
        n = num_in_flight + 1
        rate = self.estimate(n)
        return rate is None or rate >= n * (1 + self.config.headroom)


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b * x; b = 0 for a single x."""
    xs = [x for x, _ in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(y for _, y in points) / len(points)
    var = sum((x - mean_x) ** 2 for x in xs)
    if var == 0:
        return mean_y, 0.0
    b = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    return mean_y - b * mean_x, b
