"""Admission: the one object in the conductor that owns every request limit.

Per model, at most `max_in_flight` requests run, and a media stream (a request with a
Playback) is admitted only while the model's measured capacity has room for one more
(conductor.capacity: streams already playing must not be pushed into underrun); up to
`max_waiting` more wait, in arrival order, for a slot; a request past both is refused
at once with
RESOURCE_EXHAUSTED and a retry hint (core.errors.Overloaded: the gRPC edge turns it
into a RetryInfo status detail and a `retry-after-ms` trailer). A waiter whose client
leaves (cancel, deadline) gives its place up. So what the conductor holds for one
model is bounded by max_in_flight + max_waiting requests, however many arrive.

The retry hint is how long the queue ahead would take to drain at the recent pace:
(waiting + 1) / max_in_flight request durations (an exponential average of admitted
requests' durations), within [min_retry_ms, max_retry_ms].

Event-loop only (the conductor's grpc.aio loop); no locks.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass
from typing import AsyncIterator, Mapping

from conductor.capacity import Capacity, CapacityConfig
from conductor.playback import Playback
from core.errors import Overloaded


@dataclass(frozen=True)
class AdmissionConfig:
    """One model's limits (the deployment's `admission:` key under the model)."""

    max_in_flight: int = 64
    max_waiting: int = 128
    min_retry_ms: int = 50
    max_retry_ms: int = 30_000
    capacity: CapacityConfig = CapacityConfig()

    def __post_init__(self) -> None:
        for name in ("max_in_flight", "max_waiting", "min_retry_ms", "max_retry_ms"):
            value, low = getattr(self, name), 1 if name == "max_in_flight" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"admission.{name} must be an integer >= {low}, got {value!r}")
        if self.min_retry_ms > self.max_retry_ms:
            raise ValueError(f"admission.min_retry_ms ({self.min_retry_ms}) > max_retry_ms ({self.max_retry_ms})")
        if not isinstance(self.capacity, CapacityConfig):
            raise ValueError(f"admission.capacity must be a CapacityConfig, got {self.capacity!r}")


class _Gate:
    """One model's slots and waiters. Invariant: num_in_flight <= max_in_flight, and a
    waiter is queued only while no slot is free (every one taken, or capacity has no room)."""

    def __init__(self, config: AdmissionConfig) -> None:
        self.config = config
        self.capacity = Capacity(config.capacity)
        self.num_in_flight = 0
        self.waiters: collections.deque[asyncio.Future] = collections.deque()
        self.num_refused = 0
        self.num_admitted = 0
        self.num_waited = 0  # admitted after waiting in the queue
        self.mean_duration_s = 1.0  # until a request finished: a guess, only for the hint

    def has_room(self) -> bool:
        return self.num_in_flight < self.config.max_in_flight and self.capacity.admits(self.num_in_flight)

    def retry_after_ms(self) -> int:
        ahead = len(self.waiters) + 1
        ms = 1000 * self.mean_duration_s * ahead / self.config.max_in_flight
        return int(min(max(ms, self.config.min_retry_ms), self.config.max_retry_ms))

    async def acquire(self, model: str) -> None:
        if self.has_room() and not self.waiters:
            self.num_in_flight += 1
            self.num_admitted += 1
            return
        if len(self.waiters) >= self.config.max_waiting:
            self.num_refused += 1
            raise Overloaded(f"model {model!r} is at capacity: {self.num_in_flight} requests running "
                             f"(admission.max_in_flight, or the audio rate measured for admission.capacity) and "
                             f"{len(self.waiters)} waiting (admission.max_waiting); retry later", self.retry_after_ms())
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await waiter  # release() or poke() handed it a slot: num_in_flight already counts it
            self.num_admitted += 1
            self.num_waited += 1
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(None)  # handed a slot just as it left: pass it on
            elif waiter in self.waiters:
                self.waiters.remove(waiter)
            raise

    def release(self, duration_s: float | None) -> None:
        if duration_s is not None:
            self.mean_duration_s += 0.2 * (duration_s - self.mean_duration_s)
        self.num_in_flight -= 1
        self.poke()

    def poke(self) -> None:
        """Hands free slots to waiters, oldest first (after a release, or once capacity grew)."""
        while self.waiters and self.has_room():
            waiter = self.waiters.popleft()
            if not waiter.done():
                self.num_in_flight += 1
                waiter.set_result(None)  # the slot moves to it


class Admission:
    """Limits per model; a model without its own config gets `default`."""

    def __init__(self, configs: Mapping[str, AdmissionConfig] | None = None,
                 default: AdmissionConfig = AdmissionConfig()) -> None:
        self._configs = dict(configs or {})
        self._default = default
        self._gates: dict[str, _Gate] = {}

    def _gate(self, model: str) -> _Gate:
        gate = self._gates.get(model)
        if gate is None:
            gate = self._gates[model] = _Gate(self._configs.get(model, self._default))
        return gate

    @contextlib.asynccontextmanager
    async def admit(self, model: str, playback: Playback | None = None) -> AsyncIterator[float]:
        """Holds one of the model's slots for the body, which gets the seconds it waited for
        it; raises Overloaded past the queue. playback: a media stream's (its audio counts
        towards the model's measured capacity while it runs; see `on_audio`)."""
        gate = self._gate(model)
        loop = asyncio.get_running_loop()
        queued = loop.time()
        await gate.acquire(model)
        t0 = loop.time()
        if playback is not None:
            gate.capacity.add(playback)
        try:
            yield t0 - queued
        finally:
            if playback is not None:
                gate.capacity.remove(playback)
            gate.release(loop.time() - t0)

    def on_audio(self, model: str, now_s: float) -> None:
        """A stream of `model` was sent audio: a measurement window may close, and waiters
        may now fit."""
        gate = self._gate(model)
        if gate.capacity.observe(now_s):
            gate.poke()

    def stats(self, model: str) -> dict[str, int]:
        gate = self._gate(model)
        return {"in_flight": gate.num_in_flight, "waiting": len(gate.waiters), "refused": gate.num_refused,
                "admitted": gate.num_admitted, "waited": gate.num_waited}

    def check_integrity(self) -> None:
        for model, gate in self._gates.items():
            assert 0 <= gate.num_in_flight <= gate.config.max_in_flight, f"{model}: {gate.num_in_flight} in flight"
            assert len(gate.waiters) <= gate.config.max_waiting, f"{model}: {len(gate.waiters)} waiting"
            assert not gate.waiters or not gate.has_room(), f"{model}: waiters queued while a slot is free"
