"""Bidirectional segments and no-write sequences in the attention backends, against a
plain masked attention written out here, on random packed steps (cached prefixes,
decodes, prefill chunks; blocks in scrambled order, unwritten slots NaN)."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.attention.flashinfer_backend import FlashInferBackend, PageTable
from engine.attention.metadata import AttentionMetadata
from engine.attention.torch_backend import TorchAttentionBackend, paged_attention, store_kv
from tests.engine import fake_flashinfer
from tests.engine.models.paged import PagedDriver

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 4, 2, 8
SCALE = HEAD_DIM ** -0.5


class _Stub:
    class config:
        num_layers, num_kv_heads, head_dim = 1, NUM_KV_HEADS, HEAD_DIM
        torch_dtype = torch.float32


def reference_mask(segments: list[int], seq_len: int) -> torch.Tensor:
    """The rule, entry by entry: key t is visible to query row i (position p) when t <= p,
    or t is a query token of this step with the same non-zero segment."""
    query_len = len(segments)
    cached = seq_len - query_len
    allowed = torch.zeros(query_len, seq_len, dtype=torch.bool)
    for i in range(query_len):
        for t in range(seq_len):
            same = t >= cached and segments[i] != 0 and segments[t - cached] == segments[i]
            allowed[i, t] = t <= cached + i or same
    return allowed


def reference_attention(q, k, v, allowed):
    """q [Q, H, D], k/v [L, Hkv, D], allowed [Q, L] -> [Q, H, D]: softmax over allowed keys."""
    group = NUM_HEADS // NUM_KV_HEADS
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("qhd,lhd->hql", q, k) * SCALE
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hql,lhd->qhd", scores.softmax(-1), v)


@dataclasses.dataclass
class Step:
    meta: AttentionMetadata
    q: torch.Tensor       # [T, H, D]
    k: torch.Tensor       # [T, Hkv, D] this step's keys
    v: torch.Tensor
    full_k: list          # per sequence [L, Hkv, D]: cached + this step's
    full_v: list
    segments: list        # per sequence: its query rows' segment ids
    k_cache: torch.Tensor
    v_cache: torch.Tensor


def build_step(seqs: list[tuple[int, list[int], bool]], block_size: int = 4, seed: int = 0) -> Step:
    """seqs: (cached tokens, segment id per query token, stores its K/V) per sequence."""
    driver = PagedDriver(_Stub(), num_blocks=128, block_size=block_size, seed=seed)  # room for 5 x 20 tokens
    k_cache, v_cache = driver.kv_caches[0]
    gen = torch.Generator().manual_seed(seed)
    full_k, full_v = [], []
    for i, (cached, segments, _) in enumerate(seqs):
        length = cached + len(segments)
        full_k.append(torch.randn(length, NUM_KV_HEADS, HEAD_DIM, generator=gen))
        full_v.append(torch.randn(length, NUM_KV_HEADS, HEAD_DIM, generator=gen))
        if cached:
            _, _, meta = driver.metadata([(i, [0] * cached)])
            store_kv(full_k[i][:cached], full_v[i][:cached], k_cache, v_cache, meta.slot_mapping)
    _, _, meta = driver.metadata([(i, [0] * len(segs)) for i, (_, segs, _) in enumerate(seqs)])
    writes = torch.tensor([w for _, _, w in seqs])
    row_writes = torch.repeat_interleave(writes, torch.tensor([len(s) for _, s, _ in seqs]))
    meta = dataclasses.replace(meta, slot_mapping=torch.where(row_writes, meta.slot_mapping, -1),
                               segment_ids=torch.tensor([x for _, s, _ in seqs for x in s], dtype=torch.int32),
                               write_kv=writes)
    k = torch.cat([fk[c:] for fk, (c, _, _) in zip(full_k, seqs)])
    v = torch.cat([fv[c:] for fv, (c, _, _) in zip(full_v, seqs)])
    q = torch.randn(k.shape[0], NUM_HEADS, HEAD_DIM, generator=gen)
    return Step(meta, q, k, v, full_k, full_v, [s for _, s, _ in seqs], k_cache, v_cache)


def expected_output(step: Step) -> torch.Tensor:
    starts = step.meta.query_start_loc.tolist()
    return torch.cat([reference_attention(step.q[starts[i]:starts[i + 1]], step.full_k[i], step.full_v[i],
                                          reference_mask(step.segments[i], step.full_k[i].shape[0]))
                      for i in range(step.meta.num_seqs)])


def expected_caches(step: Step, before: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The caches as they were, plus the K/V of exactly the rows that store."""
    k_cache, v_cache = before[0].clone(), before[1].clone()
    rows = (step.meta.slot_mapping >= 0).nonzero().flatten()
    store_kv(step.k[rows], step.v[rows], k_cache, v_cache, step.meta.slot_mapping[rows])
    return k_cache, v_cache


def assert_bits_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    """Bit for bit, NaNs included (the driver's unwritten slots)."""
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


sequences = st.lists(st.tuples(st.integers(0, 11),                                   # cached tokens
                               st.lists(st.sampled_from([0, 0, 1, 2]), min_size=1, max_size=9),  # segments
                               st.booleans()),                                      # stores its K/V
                     min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(seqs=sequences, block_size=st.integers(1, 5), use_kernel=st.booleans(), seed=st.integers(0, 1000))
def test_torch_backend_matches_masked_reference(seqs, block_size, use_kernel, seed):
    step = build_step(seqs, block_size, seed)
    before = (step.k_cache.clone(), step.v_cache.clone())
    backend = TorchAttentionBackend(use_kernel=use_kernel)
    out = backend.forward(backend.prepare(step.meta), step.q, step.k, step.v, step.k_cache, step.v_cache, SCALE)
    torch.testing.assert_close(out, expected_output(step), atol=1e-5, rtol=1e-5)
    k_expected, v_expected = expected_caches(step, before)
    assert_bits_equal(step.k_cache, k_expected)  # stored rows written, the rest of the pool untouched
    assert_bits_equal(step.v_cache, v_expected)


def test_prefill_with_cached_prefix_and_a_segment():
    """An image-like run in the middle of a prefill chunk over a cached prefix, next to a
    decode (which keeps the compiled kernel) and a plain causal prefill."""
    seqs = [(7, [0, 0, 3, 3, 3, 3, 0, 0], True), (5, [0], True), (6, [0, 0, 0], True)]
    step = build_step(seqs)
    backend = TorchAttentionBackend()
    plan = backend.prepare(step.meta)
    assert [m.seq for m in plan.masked] == [0]  # only the segmented sequence leaves the usual paths
    assert plan.store_rows is None
    out = backend.forward(plan, step.q, step.k, step.v, step.k_cache, step.v_cache, SCALE)
    torch.testing.assert_close(out, expected_output(step), atol=1e-5, rtol=1e-5)
    stored = paged_attention(step.q, step.k_cache, step.v_cache, step.meta, SCALE)  # every key from the pool
    torch.testing.assert_close(stored, out, atol=1e-6, rtol=1e-6)
    row = 2  # the segment's first token sees the whole segment, and nothing after it
    assert reference_mask(seqs[0][1], 15)[row].tolist() == [True] * 13 + [False] * 2


def test_a_sequence_that_does_not_store_needs_this_steps_keys():
    step = build_step([(4, [0, 0], False), (3, [0], True)])
    with pytest.raises(ValueError, match="does not store"):
        paged_attention(step.q, step.k_cache, step.v_cache, step.meta, SCALE)


def test_without_features_the_plan_is_unchanged():
    seqs = [(7, [0, 0, 0], True), (5, [0], True)]
    step = build_step(seqs)
    plain = dataclasses.replace(step.meta, segment_ids=None, write_kv=None)
    trivial = dataclasses.replace(step.meta, write_kv=None)  # all-zero segments: causal too
    for meta in (plain, trivial):
        plan = TorchAttentionBackend().prepare(meta)
        assert plan.masked == [] and plan.store_rows is None
        assert len(plan.prefill) == 1


def test_metadata_rejects_misshapen_features():
    step = build_step([(3, [0, 1], True)])
    with pytest.raises(ValueError, match="segment_ids"):
        dataclasses.replace(step.meta, segment_ids=torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="write_kv"):
        dataclasses.replace(step.meta, write_kv=torch.ones(2, dtype=torch.bool))


class _MaskedPrefill(fake_flashinfer.BatchPrefillWithPagedKVCacheWrapper):
    """The fake prefill wrapper, taking FlashInfer's flat custom_mask as the real one does."""

    def plan(self, *args, causal=False, custom_mask=None, **kwargs) -> None:
        assert causal == (custom_mask is None)
        self.custom_mask = custom_mask
        super().plan(*args, causal=True, **kwargs)

    def run(self, q, paged_kv_cache):
        if self.custom_mask is None:
            return super().run(q, paged_kv_cache)
        k_cache, v_cache = paged_kv_cache
        qo, indptr, indices, last = self.table
        out, offset = torch.empty_like(q), 0
        for i in range(len(indptr) - 1):
            pages = indices[indptr[i]:indptr[i + 1]]
            kv_len = (len(pages) - 1) * self.page_size + int(last[i])
            rows = slice(int(qo[i]), int(qo[i + 1]))
            q_len = rows.stop - rows.start
            allowed = self.custom_mask[offset:offset + q_len * kv_len].view(q_len, kv_len)  # row-major per request
            offset += q_len * kv_len
            k, v = k_cache[pages].flatten(0, 1)[:kv_len], v_cache[pages].flatten(0, 1)[:kv_len]
            out[rows] = reference_attention(q[rows], k, v, allowed)
        assert offset == self.custom_mask.numel()
        return out


def _flashinfer(monkeypatch) -> FlashInferBackend:
    mod = fake_flashinfer.install(monkeypatch)
    mod.BatchPrefillWithPagedKVCacheWrapper = _MaskedPrefill
    return FlashInferBackend(NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, torch.float32, device="cpu")


def test_flashinfer_attends_segments_through_a_custom_mask(monkeypatch):
    backend = _flashinfer(monkeypatch)
    step = build_step([(7, [0, 0, 3, 3, 3, 3, 0, 0], True), (5, [0], True), (0, [1, 1, 1, 0], True)])
    plan = backend.plan(step.meta)
    assert plan.wrapper.custom_mask is not None
    out = backend.forward(plan, step.q, step.k, step.v, step.k_cache, step.v_cache, SCALE)
    torch.testing.assert_close(out, expected_output(step), atol=1e-5, rtol=1e-5)
    causal = dataclasses.replace(step.meta, segment_ids=torch.zeros_like(step.meta.segment_ids))
    assert PageTable.of(causal).custom_mask is None  # no segment: the causal kernels, as before
    assert not PageTable.of(causal).same_as(PageTable.of(step.meta))


def test_flashinfer_refuses_no_write_steps_at_plan_time(monkeypatch):
    backend = _flashinfer(monkeypatch)
    step = build_step([(4, [0, 0], False), (3, [0], True)])
    with pytest.raises(NotImplementedError, match="write_kv"):
        backend.plan(step.meta)
