"""A stand-in `flashinfer` module for CPU tests of the FlashInfer code paths.

Its wrappers keep what plan() was given and attend in plain torch from exactly that
page table, so a test passes only if every plan describes the KV of the step that runs
it: a plan made ahead for a different page table reads the wrong pages and changes
the tokens. `install(monkeypatch)` puts it in sys.modules as "flashinfer".
"""
from __future__ import annotations

import sys
import types

import torch
import torch.nn.functional as F


class _Wrapper:
    def __init__(self, workspace: torch.Tensor, kv_layout: str = "NHD", use_tensor_cores: bool = False,
                 use_cuda_graph: bool = False, **buffers) -> None:
        assert kv_layout == "NHD"
        self.table = None
        self.num_plans = 0
        # CUDA-graph mode: the batch size and page capacity are fixed (FlashInfer raises otherwise)
        self.fixed = (len(buffers["paged_kv_last_page_len_buffer"]), len(buffers["paged_kv_indices_buffer"])) \
            if use_cuda_graph else None

    def _plan(self, qo_indptr, indptr, indices, last_page_len, page_size: int, sm_scale: float) -> None:
        if self.fixed is not None:
            assert len(last_page_len) == self.fixed[0] and len(indices) <= self.fixed[1], "graph-mode plan"
        # clone: the caller may reuse its tensors; a plan must not change after plan()
        self.table = tuple(t.clone().long().cpu() for t in (qo_indptr, indptr, indices, last_page_len))
        self.page_size, self.sm_scale = page_size, sm_scale
        self.num_plans += 1

    def run(self, q: torch.Tensor, paged_kv_cache) -> torch.Tensor:
        """q [T, H, D], caches [N, page, Hkv, D] -> [T, H, D], causal within each sequence."""
        k_cache, v_cache = paged_kv_cache
        qo, indptr, indices, last = self.table
        out = torch.empty_like(q)
        for i in range(len(indptr) - 1):
            pages = indices[indptr[i]:indptr[i + 1]]
            kv_len = (len(pages) - 1) * self.page_size + int(last[i])
            k = k_cache[pages].flatten(0, 1)[:kv_len]  # [L, Hkv, D]
            v = v_cache[pages].flatten(0, 1)[:kv_len]
            rows = slice(int(qo[i]), int(qo[i + 1]))
            q_len = rows.stop - rows.start
            allowed = torch.arange(kv_len)[None, :] <= torch.arange(kv_len - q_len, kv_len)[:, None]  # [Q, L]
            o = F.scaled_dot_product_attention(q[rows].transpose(0, 1)[None], k.transpose(0, 1)[None],
                                               v.transpose(0, 1)[None], attn_mask=allowed, scale=self.sm_scale,
                                               enable_gqa=True)  # [1, H, Q, D]
            out[rows] = o[0].transpose(0, 1)
        return out


class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             q_data_type=None, kv_data_type=None, sm_scale=None) -> None:
        qo = torch.arange(len(indptr), dtype=torch.int32)
        self._plan(qo, indptr, indices, last_page_len, page_size, sm_scale)


class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
    def plan(self, qo_indptr, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim_qk, page_size,
             causal=False, q_data_type=None, kv_data_type=None, sm_scale=None) -> None:
        assert causal
        self._plan(qo_indptr, indptr, indices, last_page_len, page_size, sm_scale)


def module() -> types.ModuleType:
    mod = types.ModuleType("flashinfer")
    mod.BatchDecodeWithPagedKVCacheWrapper = BatchDecodeWithPagedKVCacheWrapper
    mod.BatchPrefillWithPagedKVCacheWrapper = BatchPrefillWithPagedKVCacheWrapper
    return mod


def install(monkeypatch) -> types.ModuleType:
    mod = module()
    monkeypatch.setitem(sys.modules, "flashinfer", mod)
    return mod
