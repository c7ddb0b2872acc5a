"""Torch paged attention against dense causal attention, and the FlashInfer page table
against what the torch backend reads."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from engine.attention.flashinfer_backend import flashinfer_page_indices
from engine.attention.torch_backend import gather_kv, paged_attention, plan_attention, store_kv
from engine.attention.torch_plan import GatherBuffers, group_by_length
from tests.engine.models.paged import PagedDriver

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 6, 2, 8, 4


class _Stub:
    """Just enough of a model for PagedDriver's block bookkeeping."""

    class config:
        num_layers, num_kv_heads, head_dim = 1, NUM_KV_HEADS, HEAD_DIM
        torch_dtype = torch.float32


def _dense_reference(q, k, v, query_len, scale):
    """q [Q, H, D] at the last query_len positions of k/v [L, Hkv, D], causal."""
    seq_len = k.shape[0]
    group = NUM_HEADS // NUM_KV_HEADS
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # [L, H, D]
    scores = torch.einsum("qhd,lhd->hql", q, k) * scale
    pos = torch.arange(seq_len - query_len, seq_len)[:, None]
    scores = scores.masked_fill(torch.arange(seq_len)[None, :] > pos, float("-inf"))
    return torch.einsum("hql,lhd->qhd", scores.softmax(-1), v)


def _mixed_step(history=None, query_lens=None, num_blocks=40):
    """Sequences with cached history (default four: two decodes, a prefill chunk, a fresh
    prefill); history/query_lens: {seq: cached tokens}, {seq: query tokens this step}."""
    driver = PagedDriver(_Stub(), num_blocks=num_blocks, block_size=BLOCK_SIZE, seed=3)
    k_cache, v_cache = driver.kv_caches[0]
    gen = torch.Generator().manual_seed(0)
    history = history or {0: 9, 1: 4, 2: 5, 3: 0}
    query_lens = query_lens or {0: 1, 1: 1, 2: 6, 3: 7}
    full_k, full_v = {}, {}
    for seq, cached in history.items():
        query_len = query_lens[seq]
        full_k[seq] = torch.randn(cached + query_len, NUM_KV_HEADS, HEAD_DIM, generator=gen)
        full_v[seq] = torch.randn(cached + query_len, NUM_KV_HEADS, HEAD_DIM, generator=gen)
        if cached:
            _, _, meta = driver.metadata([(seq, [0] * cached)])
            store_kv(full_k[seq][:cached], full_v[seq][:cached], k_cache, v_cache, meta.slot_mapping)
    chunks = [(seq, [0] * (full_k[seq].shape[0] - history[seq])) for seq in history]
    _, _, meta = driver.metadata(chunks)
    new = [(full_k[s][history[s]:], full_v[s][history[s]:]) for s in history]
    store_kv(torch.cat([k for k, _ in new]), torch.cat([v for _, v in new]), k_cache, v_cache, meta.slot_mapping)
    return meta, k_cache, v_cache, full_k, full_v


def _check_against_dense(meta, k_cache, v_cache, full_k, full_v, plan=None):
    num_tokens = int(meta.query_start_loc[-1])
    q = torch.randn(num_tokens, NUM_HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    scale = HEAD_DIM ** -0.5
    out = paged_attention(q, k_cache, v_cache, meta, scale, plan)
    assert not out.isnan().any()  # never reads the NaN-filled slots nobody wrote
    starts = meta.query_start_loc.tolist()
    for i in range(meta.num_seqs):
        rows = slice(starts[i], starts[i + 1])
        ref = _dense_reference(q[rows], full_k[i], full_v[i], starts[i + 1] - starts[i], scale)
        torch.testing.assert_close(out[rows], ref, atol=1e-5, rtol=1e-5)


def test_paged_attention_matches_dense_causal_attention():
    _check_against_dense(*_mixed_step())


# decodes of lengths 2..300 (padding one batch to 300 would triple the keys), a prefill chunk
SPREAD = {i: cached for i, cached in enumerate([1, 299, 7, 150, 3, 260, 40, 180, 90, 20, 5])}
SPREAD_QUERY = {**{i: 1 for i in SPREAD}, 10: 6}


@pytest.mark.parametrize("decode_only", [False, True])
def test_decodes_of_spread_lengths_attend_in_groups_and_match_dense(decode_only):
    history = {s: c for s, c in SPREAD.items() if not decode_only or SPREAD_QUERY[s] == 1}
    meta, k_cache, v_cache, full_k, full_v = _mixed_step(history, SPREAD_QUERY, num_blocks=400)
    plan = plan_attention(meta, zero_padding=True, buffers=GatherBuffers())
    assert len(plan.decode) > 1  # the grouped path, with reused gather buffers
    assert sorted(int(r) for g in plan.decode for r in g.rows) == [
        int(meta.query_start_loc[s]) for s in history if SPREAD_QUERY[s] == 1]
    _check_against_dense(meta, k_cache, v_cache, full_k, full_v, plan)


def test_group_by_length_partitions_longest_first():
    lens = [5, 300, 7, 290, 6, 150]
    groups = group_by_length(list(range(6)), lens, overhead=64)
    assert groups == [[1, 3], [5], [2, 4, 0]]  # 300 and 290 share a batch; 150 alone; the short ones
    assert group_by_length([0, 1, 2], [9, 9, 9]) == [[0, 1, 2]]
    assert group_by_length(list(range(6)), lens, overhead=10**6) == [[1, 3, 5, 2, 4, 0]]


def test_flashinfer_page_indices_describe_the_kv_the_torch_backend_reads():
    meta, k_cache, _, full_k, _ = _mixed_step()
    indptr, indices, last_page_len = flashinfer_page_indices(meta)
    assert indptr.dtype == indices.dtype == last_page_len.dtype == torch.int32
    assert indptr.shape == (meta.num_seqs + 1,) and last_page_len.shape == (meta.num_seqs,)
    assert int(indptr[-1]) == indices.numel()
    for i in range(meta.num_seqs):
        pages = indices[indptr[i]:indptr[i + 1]].long()
        assert 1 <= int(last_page_len[i]) <= BLOCK_SIZE
        k = k_cache[pages].flatten(0, 1)  # [pages * block_size, Hkv, D]
        k = k[:(pages.numel() - 1) * BLOCK_SIZE + int(last_page_len[i])]
        torch_k = gather_kv(k_cache, meta.block_tables[i], int(meta.seq_lens[i]))
        torch.testing.assert_close(k, torch_k, atol=0, rtol=0)
        torch.testing.assert_close(k, full_k[i], atol=0, rtol=0)


def test_flashinfer_module_imports_without_flashinfer():
    code = ("import sys, engine.attention.flashinfer_backend as f, engine.models.loader, engine.models; "
            "assert 'flashinfer' not in sys.modules; assert 'transformers' not in sys.modules; print(f.FlashInferBackend.name)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
