"""Property tests of the shared-block pool under the scheduler: random prompt sets sharing
prefixes of random lengths (block-aligned or not), staggered arrivals, tight pools that
preempt and evict. A fake runner stores, per KV slot, the position and every token up to
it (what a real K/V depends on) and checks before each sample that every position of the
sequence reads exactly that: so a block reused for a different prefix, a shared block
written without copying, or a copy that lost content all fail. After every step: the pool
is consistent and each refcount equals the references held; at the end nothing is held."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv_pool import KVPool
from engine.scheduler import Scheduler, SchedulerConfig
from tests.engine.scheduler_sim import VOCAB, expected_output, make, next_token


class ContentRunner:
    """slot -> (position, tokens 0..position): the content a real K/V would depend on."""

    def __init__(self, pool: KVPool) -> None:
        self.cache: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.bs = pool.block_size
        pool.copy_block = self.copy_block
        self.num_computed = 0

    def copy_block(self, src: int, dst: int) -> None:
        for off in range(self.bs):
            if src * self.bs + off in self.cache:
                self.cache[dst * self.bs + off] = self.cache[src * self.bs + off]

    def slot(self, seq, p: int) -> int:
        return seq.block_table[p // self.bs] * self.bs + p % self.bs

    def run(self, batch) -> list[int | None]:
        out = []
        for seq, start, n, sample in zip(batch.seqs, batch.start_positions, batch.num_query_tokens,
                                         batch.sample_mask):
            ids = seq.token_ids
            for p in range(start, start + n):
                self.cache[self.slot(seq, p)] = (p, tuple(ids[:p + 1]))
            self.num_computed += n
            if not sample:
                out.append(None)
                continue
            for p in range(seq.num_tokens):  # attention would read exactly these slots
                assert self.cache.get(self.slot(seq, p)) == (p, tuple(ids[:p + 1])), (seq.request_id, p)
            out.append(next_token(ids))
        return out


def prompts_sharing(rng: random.Random, n: int, base_len: int) -> list[list[int]]:
    base = [rng.randrange(VOCAB) for _ in range(base_len)]
    return [base[:rng.randint(0, base_len)] + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 6))]
            for _ in range(n)]


def run_workload(sched: Scheduler, runner: ContentRunner, prompts, max_news, arrivals):
    """Runs the workload; ({request id: output ids}, tokens computed)."""
    computed_before = runner.num_computed
    pending = sorted(range(len(prompts)), key=lambda i: arrivals[i])
    outputs, step = {}, 0
    while pending or sched.has_work():
        while pending and arrivals[pending[0]] <= step:
            i = pending.pop(0)
            sched.add(make(f"r{i}", 0, max_news[i], arrival=i, prompt=prompts[i]))
        batch = sched.schedule()
        sched.check_integrity()
        if batch.seqs:
            for seq in sched.postprocess(batch, runner.run(batch)):
                outputs[seq.request_id] = seq.output_ids
        sched.check_integrity()
        step += 1
        assert step < 5_000
    assert sched.pool.num_used_blocks == 0 and sched.pool.num_free_blocks == sched.pool.total
    sched.pool.check_integrity([])
    return outputs, runner.num_computed - computed_before


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), block_size=st.integers(1, 5), num_blocks=st.integers(12, 40),
       chunk=st.integers(1, 12), n=st.integers(1, 8), base_len=st.integers(0, 30))
def test_random_shared_prefixes_keep_integrity_and_outputs(seed, block_size, num_blocks, chunk, n, base_len):
    rng = random.Random(seed)
    prompts = prompts_sharing(rng, n, base_len)
    max_news = [rng.randint(1, 6) for _ in prompts]
    # every request must fit the pool on its own
    prompts = [p[:num_blocks * block_size - m] for p, m in zip(prompts, max_news)]
    arrivals = [rng.randint(0, 12) for _ in prompts]
    config = SchedulerConfig(num_blocks=num_blocks, block_size=block_size, prefill_chunk_size=chunk,
                             max_num_batched_tokens=max(chunk, 8), max_num_seqs=4)
    sched = Scheduler(config)
    runner = ContentRunner(sched.pool)  # the K/V live as long as the pool
    outputs, computed = run_workload(sched, runner, prompts, max_news, arrivals)
    for i, (p, m) in enumerate(zip(prompts, max_news)):
        assert outputs[f"r{i}"] == expected_output(p, m)
    # the same workload again: the same outputs; when the pool held everything (nothing
    # evicted), every full block before a prompt's last token is reused
    evicted = sched.pool.num_evicted
    again, computed_again = run_workload(sched, runner, prompts, max_news, arrivals)
    assert again == outputs
    if evicted == 0 and sched.pool.num_evicted == 0 and sched.num_preemptions == 0:
        least = sum(len(p) - (len(p) - 1) // block_size * block_size + m - 1 for p, m in zip(prompts, max_news))
        assert computed_again == least <= computed


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), block_size=st.integers(2, 4))
def test_the_cache_off_computes_every_token(seed, block_size):
    rng = random.Random(seed)
    prompts = prompts_sharing(rng, 5, 20)
    config = SchedulerConfig(num_blocks=64, block_size=block_size, prefix_cache=False)
    sched = Scheduler(config)
    outputs, computed = run_workload(sched, ContentRunner(sched.pool), prompts, [3] * 5, [0] * 5)
    assert computed == sum(len(p) + 2 for p in prompts)  # prompt + every fed output
    assert outputs == {f"r{i}": expected_output(p, 3) for i, p in enumerate(prompts)}
