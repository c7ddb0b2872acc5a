"""Chunk policies through the bounded StreamBuffer (M*'s Algorithm 3;
formulas (6) and (7)): a stream of n items pushed in random pieces, chunks popped
after every push, then finish() and a final pop."""
from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph.chunking import Chunk, FixedChunk, LeftContext, SlidingWindow
from graph.edge import StreamingGraphEdge
from core.errors import GraphError
from graph.stream_buffer import StreamBuffer

fixed = st.builds(FixedChunk, st.integers(1, 8), pad_final=st.booleans())
left = st.builds(LeftContext, st.integers(1, 8), st.integers(0, 12), pad_final=st.booleans())
sliding = st.integers(1, 10).flatmap(
    lambda w: st.builds(SlidingWindow, st.just(w), st.integers(1, w), pad_final=st.booleans())
)
policies = st.one_of(fixed, left, sliding)
pieces = st.lists(st.integers(1, 25), min_size=1, max_size=20)
slack = st.integers(0, 6)  # max_buffered = min_buffer + slack: the tightest bounds too


def item(i: int) -> str:
    return f"x{i}"  # items differ from positions, so a position mix-up shows


def retained(policy, delivered: int, available: int) -> int:
    """Items a buffer may hold: what the next chunk (full or residual) can reach back
    to, plus the undelivered ones. Written from the policy definitions, not keep_from."""
    if isinstance(policy, FixedChunk):
        earliest = delivered
    elif isinstance(policy, LeftContext):
        earliest = max(0, delivered - policy.left)
    elif policy.pad_final:  # the next window at its regular position
        earliest = 0 if delivered == 0 else delivered + policy.stride - policy.window
    else:  # the last-W-items residual may start one item after `delivered` - W
        earliest = max(0, delivered + 1 - policy.window)
    return available - earliest


def drive(policy, n: int, sizes: list[int], extra: int, eager: bool = True, lazy_pops=None):
    """Push n items in pieces of `sizes` (cycled, capped by the credit); pop after every
    push (eager) or when `lazy_pops` says so. Returns (before_finish, final) chunks."""
    max_buffered = policy.min_buffer + extra
    buf = StreamBuffer(policy, max_buffered, name="edge a.x -> b.y")
    before, pos, k = [], 0, 0
    while pos < n:
        assert buf.credit > 0, f"{policy}: producer parked with no chunk to form (deadlock)"
        size = min(sizes[k % len(sizes)], n - pos, buf.credit)
        assert buf.can_push(size)
        buf.push([item(i) for i in range(pos, pos + size)])
        pos, k = pos + size, k + 1
        assert buf.num_buffered <= max_buffered
        if eager or buf.credit == 0 or lazy_pops[k % len(lazy_pops)]:
            before += buf.pop_ready()
            assert buf.num_buffered == retained(policy, buf.delivered, pos)
    buf.finish()
    final = buf.pop_ready()
    assert buf.pop_ready() == [] and buf.is_closed
    assert buf.num_buffered <= max_buffered
    return before, final


def check_common(policy, n: int, chunks) -> None:
    stream = [item(i) for i in range(n)]
    new = [x for c in chunks for x in c.new_items]
    assert new == stream, f"{policy}: new items do not reproduce the stream"
    assert [c.is_last for c in chunks] == [False] * (len(chunks) - 1) + [True]
    delivered = 0
    for c in chunks:
        assert list(c.items) == stream[c.start:c.end]
        assert list(c.items[:c.num_context]) == stream[c.start:c.start + c.num_context]
        assert c.start + c.num_context == delivered  # context = the items just before
        delivered += len(c.new_items)
        if not (c.is_last and policy.pad_final):
            assert c.num_pad == 0
    last = chunks[-1]
    short = 0 < len(last.new_items) < policy.full_new(last.start)
    if policy.pad_final and short:
        assert len(last.new_items) + last.num_pad == policy.full_new(last.start)
    elif policy.pad_final:
        assert last.num_pad == 0


@settings(deadline=None, max_examples=300)
@given(policies, st.integers(0, 120), pieces, slack)
def test_every_policy_reproduces_the_stream(policy, n, sizes, extra):
    before, final = drive(policy, n, sizes, extra)
    assert final, "finish() must always yield the final chunk"
    check_common(policy, n, before + final)


@settings(deadline=None, max_examples=200)
@given(policies, st.integers(0, 120), pieces, slack, st.lists(st.booleans(), min_size=1, max_size=10))
def test_chunk_boundaries_do_not_depend_on_pop_timing(policy, n, sizes, extra, lazy_pops):
    eager = sum(drive(policy, n, [1], extra), [])
    lazy = sum(drive(policy, n, sizes, extra, eager=False, lazy_pops=lazy_pops), [])
    check_common(policy, n, lazy)

    def shape(chunks):  # an empty final chunk only marks the end; the rest must agree
        return [(c.start, c.num_context, c.items, c.num_pad) for c in chunks if c.items]

    assert shape(lazy) == shape(eager)


@settings(deadline=None, max_examples=300)
@given(sliding, st.integers(0, 150), pieces, slack)
def test_sliding_window_count_follows_formula_6(policy, n, sizes, extra):
    W, S = policy.window, policy.stride
    before, final = drive(policy, n, sizes, extra)
    expected = 0 if n < W else 1 + (n - W) // S
    assert len(before) == expected
    assert all(len(c.items) == W and not c.is_last for c in before)
    assert [c.start for c in before] == [k * S for k in range(expected)]
    last = final[-1]
    if last.items and policy.pad_final:
        assert len(last.items) + last.num_pad == W  # the regular window, padded
        assert last.start == (0 if not before else before[-1].start + S)
    elif last.items:
        assert len(last.items) == min(W, n) and last.end == n  # the last W items
    check_common(policy, n, before + final)


@settings(deadline=None, max_examples=300)
@given(left, st.integers(0, 150), pieces, slack)
def test_left_context_steady_state(policy, n, sizes, extra):
    C, L = policy.chunk, policy.left
    before, final = drive(policy, n, sizes, extra)
    chunks = before + final
    check_common(policy, n, chunks)
    assert chunks[0].start == 0 and chunks[0].num_context == 0
    for c in chunks[1:-1]:
        new_from = c.start + c.num_context
        assert len(c.new_items) == C and c.num_context == min(L, new_from)
    last = chunks[-1]
    if last.items:
        assert last.num_context == min(L, last.start + last.num_context)


def input_items(policy, n: int) -> int:
    before, final = drive(policy, n, [3], 0)
    return sum(len(c.items) for c in before + final)


@settings(deadline=None, max_examples=100)
@given(st.integers(1, 8), st.integers(0, 8), st.integers(1, 60))
def test_left_context_amplification_exact(C, L, m):
    """n = m*C: the first chunk has C inputs, each later one C + min(L, kC)."""
    n = m * C
    total = input_items(LeftContext(C, L), n)
    assert total == n + sum(min(L, k * C) for k in range(1, m))
    if L <= C:
        assert Fraction(total, n) == Fraction(n + L * (m - 1), n)


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 8), st.integers(0, 16), st.booleans())
def test_left_context_amplification_tends_to_formula_7(C, L, pad):
    target = 1 + Fraction(L, C)
    errors = [abs(Fraction(input_items(LeftContext(C, L, pad), m * C), m * C) - target)
              for m in (10, 100, 1000)]
    assert errors[0] >= errors[1] >= errors[2]
    assert errors[2] <= Fraction(L * (1 + -(-L // C)), 1000 * C)  # O(1/n)
    if L:
        assert errors[2] > 0  # the first chunk has no context: the limit is approached


@settings(deadline=None, max_examples=200)
@given(fixed, st.integers(0, 120), pieces, slack)
def test_fixed_chunk_sizes_and_empty_buffer(policy, n, sizes, extra):
    K = policy.size
    max_buffered = K + extra
    buf = StreamBuffer(policy, max_buffered)
    chunks, pos, k = [], 0, 0
    while pos < n:
        size = min(sizes[k % len(sizes)], n - pos, buf.credit)
        buf.push([item(i) for i in range(pos, pos + size)])
        pos, k = pos + size, k + 1
        for c in buf.pop_ready():
            chunks.append(c)
            assert len(c.items) == K and c.num_context == 0
        if pos % K == 0:
            assert buf.num_buffered == 0  # nothing is kept past a full chunk
    buf.finish()
    final = buf.pop_ready()
    assert len(final) == 1 and len(final[0].items) == n % K
    assert final[0].num_pad == (K - n % K if policy.pad_final and n % K else 0)
    check_common(policy, n, chunks + final)


@settings(deadline=None, max_examples=100)
@given(policies, slack, st.integers(1, 10))
def test_push_beyond_credit_raises(policy, extra, over):
    buf = StreamBuffer(policy, policy.min_buffer + extra, name="edge a.x -> b.y")
    buf.push([item(i) for i in range(buf.credit)])
    assert not buf.can_push(buf.credit + over)
    with pytest.raises(GraphError, match=r"edge a\.x -> b\.y: buffer full"):
        buf.push([item(0)] * (buf.credit + over))


def test_push_after_finish_raises():
    buf = StreamBuffer(FixedChunk(2), 4, name="edge a.x -> b.y")
    buf.finish()
    with pytest.raises(GraphError, match=r"edge a\.x -> b\.y: push after"):
        buf.push([1])


@pytest.mark.parametrize("policy, minimum", [
    (FixedChunk(3), 3), (LeftContext(4, 2), 6),
    (SlidingWindow(4, 2), 5), (SlidingWindow(4, 2, pad_final=True), 4),
])
def test_bound_below_policy_minimum_is_rejected(policy, minimum):
    assert policy.min_buffer == minimum
    StreamBuffer(policy, minimum)
    with pytest.raises(GraphError, match="below the policy minimum"):
        StreamBuffer(policy, minimum - 1)
    with pytest.raises(GraphError, match=r"edge a\.x -> b\.y: max_buffered"):
        StreamingGraphEdge("a.x", "b.y", chunk_policy=policy, max_buffered=minimum - 1)


def run_all(policy, n, max_buffered):
    buf = StreamBuffer(policy, max_buffered)
    chunks = []
    for i in range(n):
        buf.push([i])
        chunks += buf.pop_ready()
    buf.finish()
    return chunks + buf.pop_ready()


def test_sliding_window_tight_bound_keeps_flowing():
    # W=4, S=2 with room for only 4 items used to park the producer after the
    # first window forever (3 items kept for the residual + 2 needed).
    chunks = run_all(SlidingWindow(4, 2), 9, SlidingWindow(4, 2).min_buffer)
    assert [c.items for c in chunks] == [(0, 1, 2, 3), (2, 3, 4, 5), (4, 5, 6, 7), (5, 6, 7, 8)]
    assert chunks[-1].num_context == 3 and chunks[-1].is_last


def test_sliding_window_pad_final_pads_the_regular_window():
    chunks = run_all(SlidingWindow(4, 2, pad_final=True), 9, 4)
    assert [c.items for c in chunks][-1] == (6, 7, 8) and chunks[-1].num_pad == 1
    short = run_all(SlidingWindow(4, 2, pad_final=True), 3, 4)
    assert short[-1].items == (0, 1, 2) and short[-1].num_pad == 1 and short[-1].is_last


def test_left_context_residual_and_empty_final_chunk():
    chunks = run_all(LeftContext(3, 2, pad_final=True), 7, 5)
    assert [(c.items, c.num_context, c.num_pad) for c in chunks] == [
        ((0, 1, 2), 0, 0), ((1, 2, 3, 4, 5), 2, 0), ((4, 5, 6), 2, 2)]
    on_boundary = run_all(LeftContext(3, 2), 6, 5)
    assert on_boundary[-1].items == () and on_boundary[-1].is_last and on_boundary[-1].start == 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["one", "one", "pop", "push2"]), max_size=30), st.booleans())
def test_passing_one_item_through_equals_push_and_pop(ops, finish):
    """StreamBuffer.pass_one (the per-item stream's shortcut) gives exactly the chunks
    push + pop_ready would, in any mix with the general path."""
    fast, slow = StreamBuffer(FixedChunk(1), 64), StreamBuffer(FixedChunk(1), 64)
    got, want, k = [], [], 0
    for op in ops:
        items = [k] if op == "one" else [k, k + 1] if op == "push2" else []
        k += len(items)
        start = fast.pass_one() if op == "one" else None
        chunk = Chunk((items[0],), start, 0) if start is not None else None
        if chunk is not None:
            got.append(chunk)
        elif items:
            fast.push(items)
        if op != "push2" and chunk is None:  # as routed edges do: the general path pops at once
            got += fast.pop_ready()
        if items:
            slow.push(items)
        want += slow.pop_ready() if op != "push2" else []
    if finish:
        fast.finish()
        slow.finish()
    got += fast.pop_ready()
    want += slow.pop_ready()
    assert got == want
    assert StreamBuffer(LeftContext(2, 1), 8).pass_one() is None  # only a policy that cuts every item alone
