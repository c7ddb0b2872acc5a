"""Dropping kept contexts: the TTL and the per-owner and global block limits drop the least
recently used first, never a pinned context or one a live request continues, and never a
running request's blocks; a dropped context's owner is told it was dropped (a bounded
memory of dropped ids); random context operations keep every refcount right."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import NotFound
from engine.context_prompt import Content
from engine.contexts import ContextLimits, ContextTable, ContextRequest
from engine.kv_pool import KVPool
from tests.engine.prefix_workload import assert_same, run
from tests.engine.test_contexts import PARAMS, ckpt, engine, ids, keep, scratch, tokens  # noqa: F401

pytestmark = pytest.mark.timeout(300)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def clocked(e):
    e.contexts.clock = clock = Clock()
    return clock


def alive(e, cid: str, owner: str = "alice") -> bool:
    try:
        e.contexts.get(cid, owner)
        return True
    except NotFound as err:
        assert "was dropped" in str(err)
        return False


def test_the_ttl_drops_idle_contexts_but_not_pinned_or_continued_ones(ckpt):
    e = engine(ckpt, context_ttl_s=60.0)
    clock = clocked(e)
    idle, pinned, busy = (keep(e, ids(10, s), rid=f"k{s}") for s in (1, 2, 3))
    e.contexts.pin(pinned, "alice")
    e.add_request("live", [5, 6], PARAMS, context=ContextRequest("alice", context_id=busy))
    e.step()  # the continuation is running
    clock.now += 61
    e.step()
    assert not alive(e, idle) and alive(e, pinned) and alive(e, busy)
    with pytest.raises(NotFound, match="unused for its TTL of 60 s"):
        e.contexts.get(idle, "alice")
    run(e, {}, PARAMS)  # the continuation finishes: the context is idle from now
    clock.now += 61
    e.step()
    assert not alive(e, busy) and alive(e, pinned)
    assert e.cache_stats()["contexts_dropped_total"] == 2
    e.check_integrity()


def test_the_owner_limit_drops_the_least_recently_used_of_that_owner(ckpt):
    e = engine(ckpt, context_max_blocks_per_owner=10, context_max_blocks=40)
    a = keep(e, ids(10, 1), rid="a")  # 14 tokens, 4 blocks hold the 13 computed
    b = keep(e, ids(10, 2), rid="b")
    other = keep(e, ids(10, 3), owner="bob", rid="o")
    e.contexts.get(a, "alice")  # a is now used more recently than b
    c = keep(e, ids(10, 4), rid="c")
    assert alive(e, a) and not alive(e, b) and alive(e, c) and alive(e, other, "bob")
    with pytest.raises(NotFound, match="its owner's contexts passed 10 KV blocks"):
        e.contexts.get(b, "alice")
    e.check_integrity()


def test_the_global_limit_drops_the_oldest_of_anyone_but_never_a_pinned_one(ckpt):
    e = engine(ckpt, context_max_blocks=12)
    first = keep(e, ids(10, 1), owner="bob", rid="a")
    e.contexts.pin(first, "bob")
    second = keep(e, ids(10, 2), rid="b")
    third = keep(e, ids(10, 3), owner="carol", rid="c")
    fourth = keep(e, ids(10, 4), rid="d")
    assert alive(e, first, "bob") and not alive(e, second) and alive(e, third, "carol") and alive(e, fourth)
    with pytest.raises(NotFound, match="the engine's contexts passed 12 KV blocks"):
        e.contexts.get(second, "alice")


def test_a_context_past_its_owners_limit_on_its_own_is_dropped_at_once(ckpt):
    e = engine(ckpt, context_max_blocks_per_owner=2)
    cid = keep(e, ids(12, 1))
    with pytest.raises(NotFound, match="was dropped"):
        e.contexts.get(cid, "alice")
    assert e.scheduler.pool.num_used_blocks == 0


def test_dropping_a_context_never_touches_a_running_request(ckpt):
    """The request continuing a context pins its blocks itself: releasing the context, and
    the global limit dropping others while new ones are kept, leave its K/V intact."""
    e = engine(ckpt, context_max_blocks=10, num_blocks=40)
    cid = keep(e, ids(14, 1))
    full = tokens(e, cid)
    e.add_request("live", [3, 1, 4], PARAMS, context=ContextRequest("alice", context_id=cid))
    e.step()
    e.contexts.release(cid, "alice")
    churn = {f"b{s}": ids(12, 10 + s) for s in range(4)}
    done = run(e, churn, PARAMS, context=ContextRequest("bob", keep=True))
    assert e.cache_stats()["contexts_dropped_total"] > 0  # the churn dropped contexts meanwhile
    assert_same(scratch(ckpt, full + [3, 1, 4]), done["live"])
    e.check_integrity()


def test_tombstones_are_bounded():
    pool = KVPool(16, 4)
    table = ContextTable(pool, ContextLimits(tombstones=2))
    made = [table.add("o", Content((1, 2), 0), []).context_id for _ in range(3)]
    for cid in made:
        table.release(cid, "o")
    with pytest.raises(NotFound, match="not found"):  # the oldest was forgotten
        table.get(made[0], "o")
    for cid in made[1:]:
        with pytest.raises(NotFound, match="was dropped"):
            table.get(cid, "o")


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), ops=st.lists(st.sampled_from(["keep", "fork", "truncate", "release", "pin",
                                                                  "touch"]), max_size=40))
def test_random_context_operations_keep_every_refcount_right(seed, ops):
    rng = random.Random(seed)
    pool = KVPool(64, 4)
    clock = Clock()
    table = ContextTable(pool, ContextLimits(max_blocks=20, max_blocks_per_owner=12), clock)
    owners = ("a", "b")
    for op in ops:
        clock.now += 1
        live = table.values()
        ctx = rng.choice(live) if live else None
        if op == "keep" or ctx is None:
            n = rng.randint(1, 17)
            blocks = [pool._pop() for _ in range(pool.blocks_for(n))]  # a finished sequence's blocks
            table.add(rng.choice(owners), Content(tuple(range(n)), n), blocks)
            pool.decref(blocks)  # the sequence leaves
        elif op == "fork":
            table.fork(ctx.context_id, ctx.owner, rng.randint(1, ctx.content.num_tokens))
        elif op == "truncate":
            table.truncate(ctx.context_id, ctx.owner, rng.randint(1, ctx.content.num_tokens))
        elif op == "release":
            table.release(ctx.context_id, ctx.owner)
        elif op == "pin":
            table.pin(ctx.context_id, ctx.owner, rng.random() < 0.5)
        else:
            table.get(ctx.context_id, ctx.owner)
        pool.check_integrity(table.holders())
        table.check()
        for owner in owners:
            droppable = [c for c in table.values() if c.owner == owner and c.droppable]
            held = sum(len(c.blocks) for c in table.values() if c.owner == owner)
            assert held <= 12 or not droppable  # over the limit only with nothing left to drop
    for ctx in table.values():
        table.release(ctx.context_id, ctx.owner)
    assert pool.num_used_blocks == 0
