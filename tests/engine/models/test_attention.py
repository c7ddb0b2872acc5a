"""Torch paged attention against dense causal attention, and the FlashInfer page table
against what the torch backend reads."""
from __future__ import annotations

import subprocess
import sys

import torch

from engine.attention.flashinfer_backend import flashinfer_page_indices
from engine.attention.torch_backend import gather_kv, paged_attention, store_kv
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


def _mixed_step():
    """Four sequences with cached history: two decodes, a prefill chunk, a fresh prefill."""
    driver = PagedDriver(_Stub(), num_blocks=40, block_size=BLOCK_SIZE, seed=3)
    k_cache, v_cache = driver.kv_caches[0]
    gen = torch.Generator().manual_seed(0)
    history = {0: 9, 1: 4, 2: 5, 3: 0}
    full_k, full_v = {}, {}
    for seq, cached in history.items():
        query_len = {0: 1, 1: 1, 2: 6, 3: 7}[seq]
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


def test_paged_attention_matches_dense_causal_attention():
    meta, k_cache, v_cache, full_k, full_v = _mixed_step()
    num_tokens = int(meta.query_start_loc[-1])
    q = torch.randn(num_tokens, NUM_HEADS, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    scale = HEAD_DIM ** -0.5
    out = paged_attention(q, k_cache, v_cache, meta, scale)
    assert not out.isnan().any()  # never reads the NaN-filled slots nobody wrote
    starts = meta.query_start_loc.tolist()
    for i in range(meta.num_seqs):
        rows = slice(starts[i], starts[i + 1])
        ref = _dense_reference(q[rows], full_k[i], full_v[i], starts[i + 1] - starts[i], scale)
        torch.testing.assert_close(out[rows], ref, atol=1e-5, rtol=1e-5)


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
    code = ("import sys, engine.attention.flashinfer_backend as f, engine.checkpoint, engine.models; "
            "assert 'flashinfer' not in sys.modules; assert 'transformers' not in sys.modules; print(f.FlashInferBackend.name)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
