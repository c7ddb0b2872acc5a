"""KV block accounting: check/act pairs, slot math, integrity under random operations."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv_pool import IntegrityError, KVPool
from engine.sampling_params import SamplingParams
from engine.scheduler import SchedulerConfig
from engine.sequence import Sequence
from core.errors import InvalidArgument, ResourceExhausted
from tests.engine.slots import slot, slots


def seq(rid: str = "r", n: int = 1) -> Sequence:
    return Sequence(rid, [1] * n, SamplingParams(max_new_tokens=1), 0, 10_000, 8)


def test_pool_sizes_are_validated_by_the_config_that_sizes_the_pool():
    with pytest.raises(InvalidArgument, match="num_blocks must be > 0"):
        SchedulerConfig(num_blocks=0, block_size=16)
    with pytest.raises(InvalidArgument, match="block_size must be > 0"):
        SchedulerConfig(num_blocks=4, block_size=0)


def test_blocks_needed_counts_only_missing_blocks():
    pool, s = KVPool(8, 4), seq()
    assert pool.blocks_needed(s, 1) == 1
    assert pool.blocks_needed(s, 4) == 1
    assert pool.blocks_needed(s, 5) == 2
    pool.allocate(s, 5)
    assert len(s.block_table) == 2 and pool.num_free_blocks == 6 and pool.num_used_blocks == 2
    s.num_cached_tokens = 5
    assert pool.blocks_needed(s, 3) == 0  # the second block still has 3 free slots
    assert pool.blocks_needed(s, 4) == 1
    pool.allocate(s, 3)
    assert len(s.block_table) == 2
    pool.free(s)
    assert s.block_table == [] and pool.num_free_blocks == 8
    pool.check_integrity()


def test_slot_math():
    pool, s = KVPool(8, 4), seq()
    pool.allocate(s, 4)
    other = seq("o")
    pool.allocate(other, 4)
    pool.allocate(s, 9)  # a third block, after other's
    assert s.block_table == [0, 2, 3] and other.block_table == [1]
    assert [slot(pool, s, p) for p in (0, 3, 4, 7, 8, 11)] == [0, 3, 8, 11, 12, 15]
    assert slots(pool, other, 1, 3) == [5, 6]
    with pytest.raises(IndexError):
        slot(pool, s, 12)
    with pytest.raises(IndexError):
        slot(pool, s, -1)


def test_running_out_of_blocks():
    pool, a, b = KVPool(3, 4), seq("a"), seq("b")
    pool.allocate(a, 8)
    assert pool.can_allocate(b, 4) and not pool.can_allocate(b, 5)
    assert pool.max_new_tokens_fitting(b) == 4
    with pytest.raises(ResourceExhausted, match="1 free blocks"):
        pool.allocate(b, 5)
    assert b.block_table == [] and pool.num_free_blocks == 1  # a failed allocate changes nothing
    pool.allocate(b, 4)
    a.num_cached_tokens = 8  # a's two blocks are full
    assert pool.num_free_blocks == 0 and not pool.can_allocate(a, 1)
    pool.free(a)
    assert pool.can_allocate(b, 12)
    pool.check_integrity()


def test_integrity_check_catches_corruption():
    pool, a = KVPool(4, 2), seq("a")
    pool.allocate(a, 2)
    pool._free.append(pool._free[0])
    with pytest.raises(IntegrityError, match="duplicates"):
        pool.check_integrity()
    pool._free.pop()
    pool._free.append(a.block_table[0])
    with pytest.raises(IntegrityError, match="both free and used"):
        pool.check_integrity()
    pool._free.pop()
    pool._free.pop()
    with pytest.raises(IntegrityError, match="!= total"):
        pool.check_integrity()


def test_freeing_blocks_one_holds_no_reference_to_is_caught():
    """Blocks are shared by reference: a table that copied another's blocks without taking
    references shows up in the refcount check, and a release past zero is refused."""
    pool, a, b = KVPool(4, 2), seq("a"), seq("b")
    pool.allocate(a, 2)
    b.block_table = list(a.block_table)
    with pytest.raises(IntegrityError, match="refcount 1 but 2 references"):
        pool.check_integrity([a.block_table, b.block_table])
    pool.free(b)
    with pytest.raises(IntegrityError, match="released by 'a' but it holds no reference"):
        pool.free(a)


@settings(max_examples=150, deadline=None)
@given(num_blocks=st.integers(1, 12), block_size=st.integers(1, 5),
       ops=st.lists(st.tuples(st.sampled_from(["alloc", "free", "advance"]), st.integers(0, 4),
                              st.integers(1, 20)), max_size=60))
def test_random_operations_keep_integrity(num_blocks, block_size, ops):
    pool = KVPool(num_blocks, block_size)
    seqs = [seq(f"s{i}") for i in range(5)]
    for op, i, n in ops:
        s = seqs[i]
        if op == "alloc":
            ok = pool.can_allocate(s, n)
            before = list(s.block_table)
            if ok:
                pool.allocate(s, n)
                assert len(s.block_table) * block_size >= s.num_cached_tokens + n
                assert s.block_table[: len(before)] == before
            else:  # the check and the action agree
                with pytest.raises(ResourceExhausted):
                    pool.allocate(s, n)
                assert s.block_table == before
        elif op == "free":
            pool.free(s)
            s.num_cached_tokens = 0
        else:  # tokens computed into the allocated blocks
            s.num_cached_tokens = min(len(s.block_table) * block_size, s.num_cached_tokens + n)
        pool.check_integrity()
        owned = [b for t in seqs for b in t.block_table]
        assert len(owned) == len(set(owned)) == pool.num_used_blocks
        assert pool.num_free_blocks + pool.num_used_blocks == pool.total
    for s in seqs:
        pool.free(s)
    assert pool.num_free_blocks == pool.total
