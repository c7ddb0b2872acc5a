"""A simulated engine step for scheduler tests.

The fake runner writes (request, position, token) into a flat slot cache through the
KV pool's slot mapping and, before "sampling", checks that every token of the
sequence is in the cache where its block table says. Its next token is a function of
the tokens so far, so a request's output never depends on batching or preemption.
"""
from __future__ import annotations

from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledBatch, Scheduler, SchedulerConfig
from engine.sequence import Sequence, SequenceStatus
from tests.engine.slots import slot

VOCAB = 97


def next_token(token_ids: list[int]) -> int:
    return (sum(token_ids) * 31 + len(token_ids)) % VOCAB


def expected_output(prompt: list[int], max_new: int) -> list[int]:
    ids = list(prompt)
    for _ in range(max_new):
        ids.append(next_token(ids))
    return ids[len(prompt):]


class FakeRunner:
    def __init__(self) -> None:
        self.cache: dict[int, tuple[str, int, int]] = {}

    def run(self, batch: ScheduledBatch, sched: Scheduler) -> list[int | None]:
        pool, out = sched.pool, []
        for seq, start, n, sample in zip(batch.seqs, batch.start_positions, batch.num_query_tokens,
                                         batch.sample_mask):
            assert start == seq.num_cached_tokens and n > 0 and start + n <= seq.num_tokens
            for p in range(start, start + n):
                self.cache[slot(pool, seq, p)] = (seq.request_id, p, seq.token_ids[p])
            if not sample:
                out.append(None)
                continue
            for p in range(seq.num_tokens):  # attention would read exactly these slots
                assert self.cache[slot(pool, seq, p)] == (seq.request_id, p, seq.token_ids[p])
            out.append(next_token(seq.token_ids))
        return out


def make(rid, prompt_len, max_new=4, arrival=0, prompt=None, **params) -> Sequence:
    if prompt is None:  # distinct per request id, the same in every process
        prompt = [(sum(map(ord, rid)) * 7 + i) % VOCAB for i in range(prompt_len)]
    return Sequence(rid, prompt, SamplingParams(max_new_tokens=max_new, **params), arrival, 100_000, VOCAB)


def step(sched: Scheduler, runner: FakeRunner) -> tuple[ScheduledBatch, list[Sequence]]:
    batch = sched.schedule()
    sched.check_integrity()
    cfg = sched.config
    assert batch.num_tokens <= cfg.max_num_batched_tokens and len(batch.seqs) <= cfg.max_num_seqs
    assert all(n <= cfg.prefill_chunk_size or n == 1 for n in batch.num_query_tokens)
    assert len({id(s) for s in batch.seqs}) == len(batch.seqs)
    assert all(s.status is not SequenceStatus.PARKED for s in batch.seqs)
    done = sched.postprocess(batch, runner.run(batch, sched))
    sched.check_integrity()
    return batch, done


def run_all(sched: Scheduler, runner: FakeRunner | None = None, limit: int = 10_000) -> dict[str, Sequence]:
    runner, finished = runner or FakeRunner(), {}
    for _ in range(limit):
        if not sched.has_work():
            break
        batch, done = step(sched, runner)
        assert batch.seqs, "work left but nothing scheduled"
        finished.update((s.request_id, s) for s in done)
    assert not sched.has_work()
    assert sched.pool.num_free_blocks == sched.pool.total
    return finished


def config(**kw) -> SchedulerConfig:
    return SchedulerConfig(**{"num_blocks": 64, "block_size": 4, **kw})
