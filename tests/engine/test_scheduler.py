"""Scheduler: continuous batching, chunked prefill, preemption, parking, abort.
Every step runs through tests.engine.scheduler_sim, which checks the KV slots a real
attention would read and integrity before and after postprocess."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import SequenceStatus
from tests.engine.scheduler_sim import FakeRunner, config, expected_output, make, run_all, step
from core.errors import InvalidArgument, NotFound


def test_config_is_validated():
    with pytest.raises(InvalidArgument, match="prefill_chunk_size must be > 0"):
        config(prefill_chunk_size=0)
    with pytest.raises(InvalidArgument, match="num_blocks must be > 0"):
        config(num_blocks=-1)
    with pytest.raises(InvalidArgument, match="block_size must be > 0"):
        config(block_size=0)
    with pytest.raises(InvalidArgument, match="max_num_seqs must be > 0"):
        config(max_num_seqs=True)  # a bool is never a count
    with pytest.raises(TypeError):
        SchedulerConfig()  # num_blocks has no default


def test_add_rejects_duplicates_and_requests_larger_than_the_pool():
    sched = Scheduler(config(num_blocks=4))
    sched.add(make("a", 4))
    with pytest.raises(InvalidArgument, match="already"):
        sched.add(make("a", 4))
    sched.add(make("fits", 12, max_new=5))  # 16 tokens of K/V at most: the last one is never fed
    with pytest.raises(InvalidArgument, match="needs up to 5 KV blocks, the pool has 4"):
        sched.add(make("big", 12, max_new=6))


def test_single_request_matches_expected_output():
    sched = Scheduler(config())
    s = make("a", 10, max_new=6)
    sched.add(s)
    done = run_all(sched)
    assert done["a"].output_ids == expected_output(s.prompt_ids, 6) and s.finish_reason == "length"


def test_decodes_first_then_prefill_chunks():
    sched, runner = Scheduler(config(prefill_chunk_size=8, max_num_batched_tokens=10)), FakeRunner()
    a = make("a", 3, max_new=10)
    sched.add(a)
    step(sched, runner)  # a prefilled, one token sampled
    b = make("b", 30, arrival=1)
    sched.add(b)
    batch, _ = step(sched, runner)
    assert batch.seqs == [a, b] and batch.num_query_tokens == [1, 8] and batch.sample_mask == [True, False]
    batch, _ = step(sched, runner)
    assert batch.seqs == [a, b] and batch.num_query_tokens == [1, 8]


def test_token_budget_limits_prefill_but_not_below_decodes():
    sched, runner = Scheduler(config(max_num_batched_tokens=5, prefill_chunk_size=512)), FakeRunner()
    seqs = [make(f"r{i}", 3, max_new=3, arrival=i) for i in range(4)]
    for s in seqs:
        sched.add(s)
    batch, _ = step(sched, runner)
    assert batch.seqs == seqs[:2] and batch.num_query_tokens == [3, 2]  # budget cuts r1's prompt
    batch, _ = step(sched, runner)
    assert batch.seqs[0] is seqs[0] and batch.num_query_tokens[0] == 1  # the decode goes first
    assert batch.num_tokens == 5
    assert len(run_all(sched, runner)) == 4


def test_max_num_seqs():
    sched = Scheduler(config(max_num_seqs=2))
    for i in range(5):
        sched.add(make(f"r{i}", 2, arrival=i))
    batch = sched.schedule()
    assert [s.request_id for s in batch.seqs] == ["r0", "r1"] and sched.num_running == 2
    assert sched.num_waiting == 3


def test_chunked_prefill_of_a_long_prompt():
    sched, runner = Scheduler(config(prefill_chunk_size=32)), FakeRunner()
    s = make("long", 100, max_new=2)
    sched.add(s)
    chunks = []
    for _ in range(4):
        batch, _ = step(sched, runner)
        chunks.append((batch.num_query_tokens[0], batch.sample_mask[0]))
    assert chunks == [(32, False), (32, False), (32, False), (4, True)]
    assert s.num_output_tokens == 1 and s.num_cached_tokens == 100
    run_all(sched, runner)
    assert s.output_ids == expected_output(s.prompt_ids, 2)


def test_new_requests_join_mid_run():
    sched, runner = Scheduler(config()), FakeRunner()
    a = make("a", 5, max_new=20)
    sched.add(a)
    for _ in range(3):
        step(sched, runner)
    b = make("b", 6, max_new=3, arrival=1)
    sched.add(b)
    batch, _ = step(sched, runner)
    assert batch.seqs == [a, b] and batch.num_query_tokens == [1, 6] and batch.sample_mask == [True, True]
    done = run_all(sched, runner)
    assert done["b"].output_ids == expected_output(b.prompt_ids, 3)
    assert done["a"].output_ids == expected_output(a.prompt_ids, 20)


def test_preemption_takes_the_newest_running_sequence():
    # 6 blocks of 2 tokens; three 4-token prompts fill 2 blocks each.
    sched, runner = Scheduler(config(num_blocks=6, block_size=2)), FakeRunner()
    seqs = [make(f"r{i}", 4, max_new=6, arrival=i) for i in range(3)]
    for s in seqs:
        sched.add(s)
    step(sched, runner)
    assert sched.pool.num_free_blocks == 0 and all(s.num_output_tokens == 1 for s in seqs)
    batch, _ = step(sched, runner)  # each needs a third block: r2 is preempted for r0, then r1
    assert batch.seqs == seqs[:2] and sched.num_preemptions == 1
    assert seqs[2].status is SequenceStatus.WAITING and seqs[2].num_cached_tokens == 0
    assert seqs[2].block_table == [] and seqs[2].num_output_tokens == 1  # output kept
    assert list(sched.waiting) == [seqs[2]]
    done = run_all(sched, runner)
    for s in seqs:
        assert done[s.request_id].output_ids == expected_output(s.prompt_ids, 6)


def test_preempted_sequence_goes_to_the_front_of_waiting():
    sched, runner = Scheduler(config(num_blocks=4, block_size=2, max_num_seqs=2)), FakeRunner()
    seqs = [make(f"r{i}", 4, max_new=4, arrival=i) for i in range(3)]
    for s in seqs:
        sched.add(s)
    step(sched, runner)  # r0, r1 admitted (max_num_seqs=2), pool full
    step(sched, runner)  # r1 preempted
    assert list(sched.waiting) == [seqs[1], seqs[2]]
    run_all(sched, runner)


@pytest.mark.parametrize("num_blocks, block_size, chunk, budget", [
    (6, 2, 512, 2048), (5, 4, 3, 7), (10, 1, 4, 6), (8, 3, 2, 8)])
def test_tiny_pool_forces_preemption_and_everything_completes(num_blocks, block_size, chunk, budget):
    cfg = config(num_blocks=num_blocks, block_size=block_size, prefill_chunk_size=chunk,
                 max_num_batched_tokens=budget)
    sched = Scheduler(cfg)
    seqs = [make(f"r{i}", 2 + i % 4, max_new=3 + i % 5, arrival=i) for i in range(10)]
    for s in seqs:
        sched.add(s)
    done = run_all(sched)
    assert sched.num_preemptions > 0
    for s in seqs:
        assert done[s.request_id].output_ids == expected_output(s.prompt_ids, s.params.max_new_tokens)


def test_parked_sequences_are_never_scheduled_and_unpark_resumes():
    sched, runner = Scheduler(config()), FakeRunner()
    a, b = make("a", 4, max_new=8), make("b", 4, max_new=8, arrival=1)
    sched.add(a)
    sched.add(b)
    step(sched, runner)
    sched.park("a")
    blocks = list(a.block_table)
    assert sched.num_parked == 1 and a.status is SequenceStatus.PARKED
    for _ in range(3):
        batch, _ = step(sched, runner)
        assert batch.seqs == [b]
    assert a.block_table == blocks and a.num_output_tokens == 1  # kept its blocks, did nothing
    sched.park("a")  # idempotent
    sched.unpark("a")
    batch, _ = step(sched, runner)
    assert batch.seqs == [a, b]
    sched.unpark("a")  # not parked: nothing to do
    done = run_all(sched, runner)
    assert done["a"].output_ids == expected_output(a.prompt_ids, 8)


def test_park_everything_leaves_no_work_and_unknown_ids_are_not_found():
    sched = Scheduler(config())
    sched.add(make("a", 4))
    sched.park("a")  # parked while still waiting
    assert not sched.has_work() and sched.schedule().seqs == []
    sched.unpark("a")
    assert sched.has_work() and sched.num_waiting == 1
    with pytest.raises(NotFound, match="'zz'"):
        sched.park("zz")
    with pytest.raises(NotFound):
        sched.unpark("zz")
    run_all(sched)


def test_parked_blocks_are_reclaimed_rather_than_stall():
    sched, runner = Scheduler(config(num_blocks=3, block_size=2)), FakeRunner()
    a = make("a", 5, max_new=2)
    sched.add(a)
    step(sched, runner)
    sched.park("a")  # holds all 3 blocks
    b = make("b", 5, max_new=2, arrival=1)
    sched.add(b)
    batch, _ = step(sched, runner)
    assert batch.seqs == [b] and a.block_table == [] and a.num_cached_tokens == 0
    sched.unpark("a")
    assert a.status is SequenceStatus.WAITING  # recomputes, like a preempted sequence
    done = run_all(sched, runner)
    assert done["a"].output_ids == expected_output(a.prompt_ids, 2)


def test_abort_frees_blocks():
    sched, runner = Scheduler(config()), FakeRunner()
    a, b = make("a", 9, max_new=8), make("b", 4, max_new=8, arrival=1)
    sched.add(a)
    sched.add(b)
    step(sched, runner)
    used = sched.pool.num_used_blocks
    assert sched.abort("a") is a
    assert a.finish_reason == "aborted" and a.is_finished and a.block_table == []
    assert sched.pool.num_used_blocks == used - 3
    assert sched.abort("a") is None and sched.abort("nope") is None
    sched.check_integrity()
    # aborted while its step is in flight: postprocess skips it
    batch = sched.schedule()
    sched.abort("b")
    assert sched.postprocess(batch, [0]) == [] and b.num_output_tokens == 1
    sched.check_integrity()
    assert not sched.has_work() and sched.pool.num_free_blocks == sched.pool.total


def test_eos_finishes_and_frees():
    sched, runner = Scheduler(config()), FakeRunner()
    s = make("a", 4, max_new=50)
    first = expected_output(s.prompt_ids, 3)
    # the same prompt, so the same stream: it stops at the first occurrence of first[2]
    s2 = make("b", 4, max_new=50, arrival=1, prompt=s.prompt_ids, eos_token_ids=(first[2],))
    sched.add(s2)
    done = run_all(sched, runner)
    assert done["b"].finish_reason == "eos" and done["b"].output_ids == first[: first.index(first[2]) + 1]


def test_postprocess_rejects_bad_input():
    sched = Scheduler(config())
    sched.add(make("a", 2))
    batch = sched.schedule()
    with pytest.raises(ValueError, match="1 sequences"):
        sched.postprocess(batch, [])
    with pytest.raises(ValueError, match="no sampled token"):
        sched.postprocess(batch, [None])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), num_blocks=st.integers(4, 24), block_size=st.integers(1, 4),
       chunk=st.integers(1, 16), budget=st.integers(1, 24), max_seqs=st.integers(1, 6))
def test_random_workloads_complete_with_integrity(data, num_blocks, block_size, chunk, budget, max_seqs):
    sched = Scheduler(config(num_blocks=num_blocks, block_size=block_size, prefill_chunk_size=chunk,
                             max_num_batched_tokens=budget, max_num_seqs=max_seqs))
    runner, capacity = FakeRunner(), num_blocks * block_size
    reqs = data.draw(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 8), st.integers(0, 6)),
                              min_size=1, max_size=10))
    pending = sorted(((join, i, min(p, capacity), m) for i, (p, m, join) in enumerate(reqs)), reverse=True)
    seqs, finished, aborted = {}, {}, set()
    for t in range(5000):
        while pending and pending[-1][0] <= t:
            _, i, p, m = pending.pop()
            m = max(1, min(m, capacity + 1 - p))
            seqs[f"r{i}"] = s = make(f"r{i}", p, max_new=m, arrival=i)
            sched.add(s)
        live = sorted(sched.request_ids)
        if live and data.draw(st.integers(0, 9)) == 0:
            rid = data.draw(st.sampled_from(live))
            action = data.draw(st.sampled_from(["park", "unpark", "abort"]))
            if action == "abort":
                aborted.add(rid)
                sched.abort(rid)
            else:
                getattr(sched, action)(rid)
        if not sched.has_work():
            for rid in list(sched.parked):
                sched.unpark(rid)
        if not sched.has_work() and not pending:
            break
        batch, done = step(sched, runner)
        assert batch.seqs or not sched.has_work(), "work left but nothing scheduled"
        finished.update((s.request_id, s) for s in done)
    assert not pending and not sched.has_work() and sched.num_parked == 0
    assert sched.pool.num_free_blocks == sched.pool.total
    assert set(finished) | aborted == set(seqs)
    for rid, s in finished.items():
        assert s.output_ids == expected_output(s.prompt_ids, s.params.max_new_tokens)
