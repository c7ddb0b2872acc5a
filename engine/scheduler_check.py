"""The scheduler's invariants, checked by tests after every step: the pool is consistent
and each block's refcount equals the references the sequences (and contexts) hold; every
unfinished sequence is in exactly the queue its status names; a waiting sequence holds
no blocks; blocks cover the computed tokens and no more than all of them need."""
from __future__ import annotations

from engine.kv_pool import IntegrityError
from engine.sequence import Sequence, SequenceStatus

WAITING, RUNNING, PARKED = SequenceStatus.WAITING, SequenceStatus.RUNNING, SequenceStatus.PARKED


def check_scheduler(sched, other_holders=()) -> None:
    sched.pool.check_integrity([*sched.holders(), *other_holders])
    queues = [(WAITING, list(sched.waiting)), (RUNNING, sched.running), (PARKED, list(sched.parked.values()))]
    tracked = [s for _, q in queues for s in q]
    if sorted(s.request_id for s in tracked) != sorted(sched.request_ids):
        raise IntegrityError("queues and the request index disagree")
    if [s.arrival for s in sched.running] != sorted(s.arrival for s in sched.running):
        raise IntegrityError("running is not in arrival order")
    for status, queue in queues:
        for seq in queue:
            _check_seq(sched.pool, seq, status)


def _check_seq(pool, seq: Sequence, status: SequenceStatus) -> None:
    name = seq.request_id
    if seq.status is not status:
        raise IntegrityError(f"{name!r} is {seq.status.name} in the {status.name} queue")
    if status is WAITING and (seq.block_table or seq.num_cached_tokens):
        raise IntegrityError(f"waiting {name!r} holds blocks or cached tokens")
    if not 0 <= seq.num_cached_tokens < seq.num_tokens:
        raise IntegrityError(f"{name!r} caches {seq.num_cached_tokens} of {seq.num_tokens} tokens")
    if not seq.num_cached_tokens <= len(seq.block_table) * pool.block_size:
        raise IntegrityError(f"{name!r}: {len(seq.block_table)} blocks do not cover "
                             f"{seq.num_cached_tokens} cached tokens")
    if len(seq.block_table) > pool.blocks_for(seq.num_tokens):
        raise IntegrityError(f"{name!r} holds more blocks than its tokens need")
    if len(seq.base_blocks) != pool.blocks_for(seq.base_tokens):
        raise IntegrityError(f"{name!r} pins {len(seq.base_blocks)} blocks for {seq.base_tokens} context tokens")
