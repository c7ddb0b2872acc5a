"""The stateless engine: one-shot work items from many requests, batched when they match.

Engines without per-request state between calls (a codec decoding a window of codes,
a DiT running one denoising step, a VAE decode) queue `WorkItem`s here. A step reads
schedule -> run -> postprocess:

    schedule     the most urgent queued item fixes the batch key (config.policy: least
                 slack first, an item without a deadline aging into urgency; fcfs: the
                 oldest); up to `max_batch_size` items with the same key join it, most
                 urgent first (so no key starves: every item's slack falls as it waits),
                 their weights summing to at most `max_batch_weight` (the first always
                 runs: a bound on how long one batch holds the engine, since a running
                 batch is never preempted by a more urgent item);
    run          `run_batch(items)` -> one output per item, in order;
    postprocess  one WorkResult per item. If the batch raises, each item is retried alone
                 so one bad item fails only its own request.

The key is whatever makes items batchable (tensor shapes, node, dtype): the engine
never looks inside payloads.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable

from core.pace import Pace
from engine.slack_policy import SlackPolicy, slack_of


@dataclass(frozen=True)
class StatelessConfig:
    max_batch_size: int = 8
    max_queued: int = 1024  # add() refuses beyond this many queued items (can_add() says so first)
    policy: SlackPolicy = field(default_factory=SlackPolicy)
    max_batch_weight: int | None = None  # items' weights a batch sums to at most; None: no bound

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.max_queued < 1:
            raise ValueError(f"StatelessConfig: max_batch_size ({self.max_batch_size}) and max_queued "
                             f"({self.max_queued}) must be >= 1")
        if self.max_batch_weight is not None and self.max_batch_weight < 1:
            raise ValueError(f"StatelessConfig: max_batch_weight must be >= 1 or None, got {self.max_batch_weight}")


@dataclass(frozen=True)
class WorkItem:
    request_id: str
    key: Hashable     # items batch together only when their keys are equal
    payload: Any      # what run_batch reads
    tag: Any = None   # carried to the result untouched (e.g. the node run it answers)
    pace: Pace | None = None  # when its output is due (its item 0); None: no media deadline
    queued_s: float = field(default_factory=time.time)
    weight: int = 1   # what it adds to a batch's work (e.g. a codec window's frames), >= 1


@dataclass(frozen=True)
class WorkResult:
    item: WorkItem
    output: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class StatelessEngine:
    def __init__(self, run_batch: Callable[[list[WorkItem]], list[Any]],
                 config: StatelessConfig = StatelessConfig(), clock=time.time) -> None:
        """clock: unix seconds, what deadlines are compared with (a simulated one in tests)."""
        self.run_batch = run_batch
        self.clock = clock
        self.config = config
        self.queue: deque[WorkItem] = deque()
        self.num_steps = 0
        self.num_items = 0  # items run so far (num_items / num_steps = mean batch size)

    def can_add(self) -> bool:
        return len(self.queue) < self.config.max_queued

    def add(self, item: WorkItem) -> None:
        if not self.can_add():
            raise OverflowError(f"stateless engine queue is full ({self.config.max_queued} items)")
        self.queue.append(item)

    def abort(self, request_id: str) -> int:
        """Drops the queued items of `request_id`; returns how many."""
        before = len(self.queue)
        self.queue = deque(i for i in self.queue if i.request_id != request_id)
        return before - len(self.queue)

    def repace(self, request_id: str, origin_s: float) -> None:
        """The request's playback origin moved: its queued items' deadlines with it."""
        self.queue = deque(replace(i, pace=i.pace.moved(origin_s)) if i.request_id == request_id and i.pace else i
                           for i in self.queue)

    def has_work(self) -> bool:
        return bool(self.queue)

    @property
    def num_queued(self) -> int:
        return len(self.queue)

    def step(self) -> list[WorkResult]:
        batch = self._schedule()
        if not batch:
            return []
        results = self._run(batch)
        self.num_steps += 1
        self.num_items += len(batch)
        return results

    def _schedule(self) -> list[WorkItem]:
        if not self.queue:
            return []
        policy, now = self.config.policy, self.clock()

        def slack(item: WorkItem) -> float:
            return slack_of(item.pace.due_s() if item.pace else None, item.queued_s, now, policy)

        key = policy.most_urgent(self.queue, slack).key
        same = [i for i in self.queue if i.key == key]
        if not policy.is_fcfs:
            same.sort(key=slack)  # stable: equal slack keeps queue order
        batch = self._fill(same)
        taken = {id(i) for i in batch}
        self.queue = deque(i for i in self.queue if id(i) not in taken)
        return batch

    def _fill(self, candidates: list[WorkItem]) -> list[WorkItem]:
        """The leading candidates within max_batch_size and max_batch_weight (at least one)."""
        limit = self.config.max_batch_weight
        batch, weight = [], 0
        for item in candidates[:self.config.max_batch_size]:
            weight += item.weight
            if batch and limit is not None and weight > limit:
                break
            batch.append(item)
        return batch

    def _run(self, batch: list[WorkItem]) -> list[WorkResult]:
        try:
            outputs = self.run_batch(batch)
            if len(outputs) != len(batch):
                raise RuntimeError(f"run_batch returned {len(outputs)} outputs for {len(batch)} items")
            return [WorkResult(item, out) for item, out in zip(batch, outputs)]
        except Exception as e:  # noqa: BLE001 - isolate the failing item below
            if len(batch) == 1:
                return [WorkResult(batch[0], error=e)]
        return [r for item in batch for r in self._run([item])]

    def check_integrity(self) -> None:
        ids = [id(i) for i in self.queue]
        assert len(ids) == len(set(ids)), "an item is queued twice"
