"""Continuous batching over a paged KV pool.

Each step: the running sequences' decodes first (one token each, so generation never
stalls behind a long prompt), in the order of the config's SlackPolicy (least slack
first; with an urgent request around, those with plenty of buffered audio sit the step
out), then prefill chunks of running sequences, then new requests in arrival order
while blocks and the token budget allow. When the pool
cannot hold a running sequence's next token, the newest running sequence is
preempted by recompute: its blocks are freed and it goes back to the front of the
waiting queue with its output kept, to be prefilled again (prompt + output).

Admission first takes the blocks a new sequence's prompt already has in the pool (named
full blocks, or the context it continues: engine.prefix_cache); only the rest counts
against the step's token budget. A preempted sequence drops its references and looks
its blocks up again when it is admitted again.
"""
from __future__ import annotations

import bisect
import time
from collections import deque
from dataclasses import dataclass, field, fields

from core.block_hash import model_seed
from engine.batch import ScheduledBatch
from engine.block_chain import BlockChain
from engine.kv_pool import KVPool
from engine.prefix_cache import PrefixCache
from engine.scheduler_check import check_scheduler
from engine.sequence import Sequence, SequenceStatus
from engine.slack_policy import SlackPolicy, slack_of
from core.errors import InvalidArgument, NotFound

__all__ = ["ScheduledBatch", "Scheduler", "SchedulerConfig"]

WAITING, RUNNING, PARKED = SequenceStatus.WAITING, SequenceStatus.RUNNING, SequenceStatus.PARKED


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    max_num_seqs: int = 64              # sequences per step (and running at once)
    max_num_batched_tokens: int = 2048  # query tokens per step
    prefill_chunk_size: int = 512       # prompt tokens per sequence per step
    num_blocks: int                     # KV pool size, in blocks
    block_size: int = 16                # tokens per block
    policy: SlackPolicy = field(default_factory=SlackPolicy)  # decode order (engine.slack_policy)
    prefix_cache: bool = True           # reuse computed blocks across sequences (engine.prefix_cache)

    def __post_init__(self) -> None:
        if not isinstance(self.prefix_cache, bool):
            raise InvalidArgument(f"prefix_cache must be true or false, got {self.prefix_cache!r}")
        for f in fields(self):
            if f.name in ("policy", "prefix_cache"):
                continue
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidArgument(f"{f.name} must be > 0, got {value!r}")


class _Budget:
    """What is left of one step's token and sequence limits."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.tokens = config.max_num_batched_tokens
        self.seqs_left = config.max_num_seqs
        self.seqs: list[Sequence] = []
        self.counts: list[int] = []
        self.ids: set[int] = set()

    @property
    def full(self) -> bool:
        return self.tokens == 0 or self.seqs_left == 0

    def add(self, seq: Sequence, n: int) -> None:
        self.tokens -= n
        self.seqs_left -= 1
        self.seqs.append(seq)
        self.counts.append(n)
        self.ids.add(id(seq))


class Scheduler:
    def __init__(self, config: SchedulerConfig, clock=time.time, seed: bytes = model_seed(""),
                 on_retire=None) -> None:
        """clock: unix seconds, what deadlines are compared with (a simulated one in tests);
        seed: the model's block-name seed (core.block_hash.model_seed); on_retire(seq): called
        as a sequence leaves, before its blocks are dropped (the engine keeps contexts there)."""
        self.config = config
        self.clock = clock
        self.pool = KVPool(config.num_blocks, config.block_size)
        self.cache = PrefixCache(self.pool, config.prefix_cache)
        self.seed = seed
        self.on_retire = on_retire
        self.waiting: deque[Sequence] = deque()  # no blocks; preempted ones at the front
        self.running: list[Sequence] = []        # hold blocks; sorted by arrival, newest last
        self.parked: dict[str, Sequence] = {}    # never scheduled; keep their blocks
        self._seqs: dict[str, Sequence] = {}     # every unfinished sequence, by request id (the engine's index)
        self.num_preemptions = 0
        self._preempted_this_step = False

    # -- requests ----------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        if seq.request_id in self._seqs:
            raise InvalidArgument(f"request id {seq.request_id!r} is already in the engine")
        if seq.status is not WAITING or seq.block_table or seq.num_cached_tokens:
            raise InvalidArgument(f"request {seq.request_id!r} is not a fresh sequence")
        # The last sampled token is never fed back, so its K/V never need a slot.
        most = seq.num_prompt_tokens + seq.params.max_new_tokens - 1
        if self.pool.blocks_for(most) > self.pool.total:
            raise InvalidArgument(
                f"request {seq.request_id!r} needs up to {self.pool.blocks_for(most)} KV blocks, "
                f"the pool has {self.pool.total}")
        if seq.chain is None and self.cache.enabled:
            seq.chain = BlockChain(self.seed)
        self._seqs[seq.request_id] = seq
        self.waiting.append(seq)

    def abort(self, request_id: str) -> Sequence | None:
        seq = self._seqs.get(request_id)
        if seq is None:
            return None
        self._retire(seq)
        seq.finish("aborted")
        return seq

    def park(self, request_id: str) -> None:
        seq = self.get(request_id)
        if seq.status is PARKED:
            return
        self._detach(seq)
        seq.status = PARKED
        self.parked[request_id] = seq

    def unpark(self, request_id: str) -> None:
        seq = self.get(request_id)
        if seq.status is not PARKED:
            return
        del self.parked[request_id]
        if seq.block_table:
            seq.status = RUNNING
            bisect.insort(self.running, seq, key=lambda s: s.arrival)
        else:  # its blocks were reclaimed while parked: recompute, in arrival order
            seq.status = WAITING
            i = next((i for i, s in enumerate(self.waiting) if s.arrival > seq.arrival), len(self.waiting))
            self.waiting.insert(i, seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_parked(self) -> int:
        return len(self.parked)

    # -- one step ----------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        batch = self._schedule_once()
        # Parked sequences holding the blocks everything else needs would stall the
        # engine with work but an empty batch: take their blocks (they recompute later).
        while not batch.seqs and self.has_work() and self._reclaim_parked():
            batch = self._schedule_once()
        return batch

    def postprocess(self, batch: ScheduledBatch, sampled: list[int | None]) -> list[Sequence]:
        if len(sampled) != len(batch.seqs):
            raise ValueError(f"{len(sampled)} sampled ids for {len(batch.seqs)} sequences")
        finished = []
        for seq, n, sample, token in zip(batch.seqs, batch.num_query_tokens, batch.sample_mask, sampled):
            if seq.is_finished:  # aborted while the step ran
                continue
            seq.num_cached_tokens += n
            self.cache.register(seq)
            if not sample:
                continue
            if token is None:
                raise ValueError(f"no sampled token for request {seq.request_id!r}")
            seq.append_token(token)
            if seq.is_finished:
                self._retire(seq)
                finished.append(seq)
        return finished

    def _schedule_once(self) -> ScheduledBatch:
        self._preempted_this_step = False
        budget = _Budget(self.config)
        self._schedule_decodes(budget)
        self._schedule_running_prefills(budget)
        # As vLLM does: after a preemption the pool is tight; admitting now would only
        # take blocks the running sequences need next step.
        if not self._preempted_this_step:
            self._admit_waiting(budget)
        return ScheduledBatch(budget.seqs, budget.counts)

    def _slack(self, seq: Sequence, now: float) -> float:
        due = seq.pace.due_s(seq.num_output_tokens) if seq.pace is not None else None
        return slack_of(due, seq.queued_s, now, self.config.policy)

    def _schedule_decodes(self, budget: _Budget) -> None:
        now = self.clock()
        decodable = [s for s in self.running if s.num_uncached_tokens == 1]
        # A new request waiting for its prefill counts towards urgency (decodes far ahead
        # of playback yield to it too; it is admitted below) when it can start now: its
        # blocks are there and a sequence slot is free. Yielding to one that cannot start
        # would stall the steps that free them (with every slot taken, an empty step).
        head = self.waiting[0] if self.waiting else None
        fits = head is not None and len(self.running) < self.config.max_num_seqs and self.pool.can_allocate(
            head, min(head.num_uncached_tokens, self.config.prefill_chunk_size))
        waiting = [head] if fits else []
        for seq in self.config.policy.pick(decodable + waiting, lambda s: self._slack(s, now)):
            if budget.full:
                return
            if seq.status is not RUNNING:
                continue  # the waiting request, or preempted by a more urgent one in this loop
            if not self._make_room(seq, 1, budget):
                self._preempt(seq)  # it is the newest running sequence
                continue
            self.pool.allocate(seq, 1)
            budget.add(seq, 1)

    def _schedule_running_prefills(self, budget: _Budget) -> None:
        for seq in list(self.running):
            if budget.full:
                return
            if seq.status is not RUNNING or seq.num_uncached_tokens <= 1:
                continue
            n = min(seq.num_uncached_tokens, self.config.prefill_chunk_size, budget.tokens)
            # Shrink the chunk to what fits rather than preempt for it; only when not a
            # single token fits are newer sequences preempted.
            if self.pool.max_new_tokens_fitting(seq) == 0 and not self._make_room(seq, 1, budget):
                continue
            n = min(n, self.pool.max_new_tokens_fitting(seq))
            self.pool.allocate(seq, n)
            budget.add(seq, n)

    def _admit_waiting(self, budget: _Budget) -> None:
        while self.waiting and not budget.full and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            cached = self.cache.reuse(seq)
            n = min(seq.num_uncached_tokens, self.config.prefill_chunk_size, budget.tokens)
            if not self.pool.can_allocate(seq, n):
                self.cache.release(seq)
                return  # FCFS: nobody overtakes the head of the queue
            self.cache.admitted(seq, cached)
            self.waiting.popleft()
            seq.status = RUNNING
            bisect.insort(self.running, seq, key=lambda s: s.arrival)
            self.pool.allocate(seq, n)
            budget.add(seq, n)

    def _make_room(self, seq: Sequence, n: int, budget: _Budget) -> bool:
        """Preempt the newest running sequences not yet scheduled this step until seq can
        take n more tokens. False when seq itself is the newest left."""
        while not self.pool.can_allocate(seq, n):
            victim = next((s for s in reversed(self.running) if id(s) not in budget.ids), None)
            if victim is None or victim is seq:
                return False
            self._preempt(victim)
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.cache.release(seq)
        seq.status = WAITING
        self.running.remove(seq)
        self.waiting.appendleft(seq)
        self.num_preemptions += 1
        self._preempted_this_step = True

    def _reclaim_parked(self) -> bool:
        holders = [s for s in self.parked.values() if s.block_table]
        if not holders:
            return False
        seq = max(holders, key=lambda s: s.arrival)
        self.cache.release(seq)
        self.num_preemptions += 1
        return True

    # -- bookkeeping -------------------------------------------------------------------
    def get(self, request_id: str) -> Sequence:
        seq = self._seqs.get(request_id)
        if seq is None:
            raise NotFound(f"request {request_id!r} is not in the engine")
        return seq

    def find(self, request_id: str) -> Sequence | None:
        return self._seqs.get(request_id)

    @property
    def request_ids(self) -> set[str]:
        """Every unfinished sequence's request id (waiting, running or parked)."""
        return set(self._seqs)

    def _detach(self, seq: Sequence) -> None:
        """Remove seq from whichever queue holds it (a sequence that finished in
        postprocess is already FINISHED: it was running, or parked during its step)."""
        if seq.status is WAITING:
            self.waiting.remove(seq)
        elif seq.request_id in self.parked:
            del self.parked[seq.request_id]
        else:
            self.running.remove(seq)

    def _retire(self, seq: Sequence) -> None:
        self._detach(seq)
        if self.on_retire is not None:
            self.on_retire(seq)
        self.pool.free(seq)
        self.pool.decref(seq.base_blocks, seq.request_id)
        seq.base_blocks, seq.base_tokens = [], 0
        del self._seqs[seq.request_id]

    def holders(self):
        """Every block list through which the sequences hold references."""
        for seq in self._seqs.values():
            yield seq.block_table
            yield seq.base_blocks

    def check_integrity(self, other_holders=()) -> None:
        """other_holders: the block lists that hold references besides the sequences (contexts)."""
        check_scheduler(self, other_holders)
