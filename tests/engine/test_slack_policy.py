"""Least-slack scheduling (engine.slack_policy): the order engines serve streams in when
they must choose, on a simulated clock (each step costs a fixed time, so the test does
not depend on this machine's speed)."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.errors import InvalidArgument
from core.pace import Pace
from engine.scheduler import Scheduler
from engine.slack_policy import SlackPolicy
from engine.stateless_engine import StatelessConfig, StatelessEngine, WorkItem
from tests.engine.scheduler_sim import FakeRunner, config, expected_output, make, step

FRAME_S, STEP_S = 0.08, 0.05  # media seconds per token; simulated seconds per engine step


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _late_tokens(kind: str, tokens: int = 60) -> dict[str, int]:
    """Three streams on a scheduler that fits 2 tokens per step (40 tokens/s) while they need
    37.5 (1 per 0.08 s each): `ahead` has 5 s of audio buffered, `b` and `c` start playing in 0.3 s. Returns
    per stream the tokens produced after they were due."""
    clock = Clock()
    sched = Scheduler(config(max_num_batched_tokens=2, max_num_seqs=8, num_blocks=64, policy=SlackPolicy(kind)),
                      clock=clock)
    origins = {"ahead": clock.now + 5.0, "b": clock.now + 0.3, "c": clock.now + 0.3}
    for i, (rid, origin) in enumerate(origins.items()):
        seq = make(rid, 1, max_new=tokens, arrival=i)
        seq.pace = Pace(origin, FRAME_S)
        sched.add(seq)
    runner, late = FakeRunner(), dict.fromkeys(origins, 0)
    while sched.has_work():
        batch, _ = step(sched, runner)
        clock.now += STEP_S
        for seq, sampled in zip(batch.seqs, batch.sample_mask):
            k = seq.num_output_tokens - 1  # the token this step made, made by clock.now
            if sampled and clock.now > seq.pace.due_s(k):
                late[seq.request_id] += 1
    return late


def test_least_slack_keeps_every_stream_ahead_of_playback_where_fcfs_does_not():
    assert _late_tokens("deadline") == {"ahead": 0, "b": 0, "c": 0}
    fcfs = _late_tokens("fcfs")
    assert fcfs["c"] > 0  # served last every step while the buffered stream takes its share
    assert fcfs["ahead"] == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.floats(-3, 3)), min_size=1, max_size=6),
       st.sampled_from(["deadline", "fcfs"]), st.integers(1, 6))
@example(specs=[(1, 2.0)] * 4 + [(1, 0.0)], kind="deadline", budget=4)  # every slot taken, the urgent one waits
def test_order_never_changes_what_a_request_computes(specs, kind, budget):
    clock = Clock()
    sched = Scheduler(config(max_num_batched_tokens=budget, max_num_seqs=4, num_blocks=128,
                             policy=SlackPolicy(kind)), clock=clock)
    for i, (prompt_len, offset) in enumerate(specs):
        seq = make(f"r{i}", prompt_len, max_new=5, arrival=i)
        seq.pace = Pace(clock.now + offset, FRAME_S)
        sched.add(seq)
    runner, finished = FakeRunner(), {}
    while sched.has_work():
        batch, done = step(sched, runner)
        assert batch.seqs, "work left but nothing scheduled"
        clock.now += STEP_S
        finished.update((s.request_id, s) for s in done)
    for i, (prompt_len, _) in enumerate(specs):
        seq = finished[f"r{i}"]
        assert seq.output_ids == expected_output(seq.prompt_ids, 5)


def test_a_stream_far_ahead_sits_out_only_while_another_is_urgent():
    policy = SlackPolicy()
    slack = {"urgent": 0.1, "soon": 1.0, "ahead": 3.0}.get
    assert policy.pick(["ahead", "soon", "urgent"], slack) == ["urgent", "soon"]
    calm = {"soon": 1.0, "ahead": 3.0}.get
    assert policy.pick(["ahead", "soon"], calm) == ["soon", "ahead"]  # nothing urgent: all run
    assert SlackPolicy("fcfs").pick(["ahead", "soon", "urgent"], slack) == ["ahead", "soon", "urgent"]


def test_policy_and_pace_fields_are_validated():
    with pytest.raises(InvalidArgument, match="schedule must be one of"):
        SlackPolicy("lifo")
    with pytest.raises(InvalidArgument, match="urgent_s"):
        SlackPolicy(urgent_s=3.0, yield_s=2.0)
    with pytest.raises(ValueError, match="pace.item_s"):
        Pace(0.0, 0.0)
    with pytest.raises(ValueError, match="pace.first_item"):
        Pace(0.0, 0.08, first_item=-1)


def test_stateless_engine_runs_the_most_urgent_key_first_and_unpaced_items_age():
    clock = Clock()
    ran: list[list[str]] = []
    engine = StatelessEngine(lambda items: ran.append([i.request_id for i in items]) or [None] * len(items),
                             StatelessConfig(max_batch_size=2), clock=clock)
    engine.add(WorkItem("later", "wide", None, pace=Pace(clock.now + 2.0, FRAME_S), queued_s=clock.now))
    engine.add(WorkItem("text", "narrow", None, queued_s=clock.now))             # due in unpaced_s = 1 s
    engine.add(WorkItem("first", "wide", None, pace=Pace(clock.now, FRAME_S), queued_s=clock.now))
    engine.add(WorkItem("next", "narrow", None, pace=Pace(clock.now + 0.5, FRAME_S), queued_s=clock.now))
    while engine.has_work():
        engine.step()
    assert ran == [["first", "later"], ["next", "text"]]  # key of the most urgent, its items by slack
    engine.add(WorkItem("late", "k", None, pace=Pace(clock.now + 1.0, FRAME_S), queued_s=clock.now))
    engine.repace("late", clock.now - 1.0)  # its stream stalled: the origin moved
    assert engine.queue[0].pace.origin_s == clock.now - 1.0
