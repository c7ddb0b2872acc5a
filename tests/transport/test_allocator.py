from hypothesis import given, settings
from hypothesis import strategies as st

from transport.allocator import ALIGN, BlockAllocator


def test_first_fit_reuses_low_offsets():
    a = BlockAllocator(1 << 20)
    first = a.allocate(1000)
    second = a.allocate(5000)
    a.free(first)
    assert a.allocate(900) == first  # the freed low block is reused, not fresh pages
    assert second > first
    a.check_integrity()


def test_can_allocate_pairs_with_allocate():
    a = BlockAllocator(4 * ALIGN)
    assert a.can_allocate(4 * ALIGN)
    a.allocate(3 * ALIGN)
    assert not a.can_allocate(2 * ALIGN)
    assert a.can_allocate(ALIGN)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 50_000)), max_size=80))
def test_random_alloc_free_keeps_integrity(ops):
    a = BlockAllocator(1 << 20)
    live = []
    for is_alloc, n in ops:
        if is_alloc and a.can_allocate(n):
            live.append(a.allocate(n))
        elif live:
            a.free(live.pop(n % len(live)))
        a.check_integrity()
    for off in live:
        a.free(off)
    a.check_integrity()
    assert a.free_bytes == a.total and a.num_used == 0
