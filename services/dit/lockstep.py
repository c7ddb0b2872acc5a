"""Lockstep rounds of the DiT transformer on a dlo_group member (docs/offload.md).

With AllGather offload every transformer forward gathers each block from every rank of
the group, so every forward on one member must be matched by exactly one forward on
every other member, whatever each rank's arrivals and batching. The conductor sends
every rank of the group one *unit* per lockstep dispatch: a denoising branch
(a denoise_<branch> node) or, for a rank the step has no branch for, a padding
unit (node LOCKSTEP_PAD); so all ranks receive the same number of units. A rank with
units queued runs a round:

    m = min over the ranks of their queued units        (agree "min"; each has >= 1)
    take its m oldest units, batch their live work as the engine would (by key, oldest
    first, at most max_batch_size per batch)
    f = max over the ranks of their batches              (agree "max")
    run its batches, then f - len(batches) padding forwards (zero input, output dropped)

Every round consumes m units and runs f forwards on every rank. A rank without units
waits on its inbox: the peers' units were sent together with its own, so it joins once
they arrive. A unit counts from its arrival whatever becomes of it: a refused or
cancelled unit stays queued, dead (no work, still a place in the count), because its
peers' units are counted too. A failed agreement or forward breaks the lockstep for
good (the ranks' gathers no longer pair): the units' requests fail with UNAVAILABLE
naming the group, and so does every later one.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from engine.offload.group import LockstepError
from engine.stateless_engine import WorkItem
from runtime.items import OpenNode


@dataclass(eq=False)
class Unit:
    open: OpenNode                  # the node run: a denoising branch, or a padding unit
    item: WorkItem | None = None    # its work once prepared; None: padding, or refused
    is_cancelled: bool = False

    @property
    def is_live(self) -> bool:
        return self.item is not None and not self.is_cancelled


@dataclass
class LockstepStats:
    rounds: int = 0
    units: int = 0
    padding_units: int = 0          # units that came as LOCKSTEP_PAD
    forwards: int = 0               # forwards of real work
    padding_forwards: int = 0       # forwards of zero input, to pair with a peer's


def plan_batches(units: list[Unit], max_batch_size: int) -> list[list[Unit]]:
    """Live units batched by key, oldest first, as StatelessEngine schedules them."""
    batches: list[list[Unit]] = []
    open_by_key: dict[Any, list[Unit]] = {}
    for unit in units:
        batch = open_by_key.get(unit.item.key)
        if batch is None or len(batch) == max_batch_size:
            batch = open_by_key[unit.item.key] = []
            batches.append(batch)
        batch.append(unit)
    return batches


RoundResult = tuple[Unit, Any, BaseException | None]  # (unit, output, error)


class Lockstep:
    """run_batch(items) -> one output per item; pad_forward() runs one forward of zero input."""

    def __init__(self, group, max_batch_size: int, run_batch: Callable[[list[WorkItem]], list[Any]],
                 pad_forward: Callable[[], None]) -> None:
        self.group = group
        self.max_batch_size = max_batch_size
        self.run_batch = run_batch
        self.pad_forward = pad_forward
        self.units: deque[Unit] = deque()
        self.stats = LockstepStats()
        self.broken: LockstepError | None = None
        self.is_closed = False
        self._lock = threading.Lock()  # held by a round (engine thread); close() waits for it

    @property
    def where(self) -> str:
        return self.group.config.where

    def check_usable(self) -> None:
        if self.broken is not None:
            raise LockstepError(f"{self.where} is broken (restart the group's replicas): {self.broken}")
        if self.is_closed:
            raise LockstepError(f"{self.where} is closed")

    def add(self, unit: Unit, is_pad: bool = False) -> None:
        self.units.append(unit)
        self.stats.units += 1
        self.stats.padding_units += int(is_pad)

    def cancel(self, request_id: str) -> None:
        """The request's units stay queued (their peers' are counted), without work."""
        for unit in self.units:
            if unit.open.request_id == request_id:
                unit.is_cancelled = True

    @property
    def has_units(self) -> bool:
        return bool(self.units) and self.broken is None and not self.is_closed

    def round(self) -> list[RoundResult]:
        """One round (module docstring); on failure every queued unit fails with the error."""
        with self._lock:
            if not self.has_units:
                return []
            taken: list[Unit] = []
            try:
                m = self.group.agree(len(self.units), "min")
                taken = [self.units.popleft() for _ in range(min(m, len(self.units)))]
                outputs = self._forwards(plan_batches([u for u in taken if u.is_live], self.max_batch_size))
            except Exception as e:  # noqa: BLE001 - the ranks' gathers no longer pair: break for good
                self.broken = e if isinstance(e, LockstepError) else LockstepError(
                    f"{self.where}: a lockstep forward failed ({type(e).__name__}: {e}); the group's gathers "
                    "no longer pair")
                failed, self.units = taken + list(self.units), deque()
                return [(u, None, self.broken) for u in failed]
            self.stats.rounds += 1
            return [(u, outputs.get(id(u)), None) for u in taken]

    def _forwards(self, batches: list[list[Unit]]) -> dict[int, Any]:
        num_forwards = self.group.agree(len(batches), "max")
        outputs: dict[int, Any] = {}
        for batch in batches:
            results = self.run_batch([u.item for u in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"run_batch returned {len(results)} outputs for {len(batch)} items")
            outputs.update((id(u), out) for u, out in zip(batch, results))
        self.stats.forwards += len(batches)
        for _ in range(num_forwards - len(batches)):
            self.pad_forward()
            self.stats.padding_forwards += 1
        return outputs

    def close(self, timeout_s: float) -> bool:
        """No round after this; False if a round was still running after timeout_s."""
        acquired = self._lock.acquire(timeout=timeout_s)
        self.is_closed = True
        if acquired:
            self._lock.release()
        return acquired

    def load(self) -> dict[str, float]:
        s = self.stats
        return {"lockstep_rounds": s.rounds, "lockstep_units": s.units, "lockstep_padding_units": s.padding_units,
                "lockstep_forwards": s.forwards, "lockstep_padding_forwards": s.padding_forwards,
                "lockstep_queued_units": len(self.units), "lockstep_broken": int(self.broken is not None)}
