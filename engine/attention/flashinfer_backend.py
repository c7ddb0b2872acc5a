"""FlashInfer attention over the paged KV cache (CUDA only).

Importing this module does not import flashinfer: only FlashInferBackend's constructor
does. `flashinfer_page_indices` is pure torch and runs anywhere; a CPU test checks that
the arrays it builds describe exactly the KV the torch backend reads.

KV layout: FlashInfer's "NHD" paged layout is ours, [num_pages, page_size, Hkv, D] per
tensor, so k_cache/v_cache are handed over as the (k, v) tuple without copies.

Planning ahead: `plan(meta)` does the host-side work for a step (index arrays, the
wrapper's plan) and may be called for step N+1 while step N's kernels still run: plans
alternate between two wrapper sets (each with its own workspace), so planning never
touches the buffers of the step in flight. `prepare(meta)` (called by the model at the
start of a forward) returns the plan made ahead for that same metadata object, or plans
now.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.attention.metadata import AttentionMetadata
from engine.attention.torch_backend import store_kv

WORKSPACE_BYTES = 128 * 1024 * 1024


def flashinfer_page_indices(meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's CSR page table for a step, as CPU int32 tensors.

    indptr [num_seqs + 1]: sequence i's pages are indices[indptr[i]:indptr[i+1]];
    indices [nnz_pages]: physical block ids, in token order;
    last_page_len [num_seqs]: tokens used in each sequence's last page (1..block_size).
    """
    seq_lens = meta.seq_lens.cpu().long()  # [S]
    block_tables = meta.block_tables.cpu().long()  # [S, max_blocks]
    num_pages = (seq_lens + meta.block_size - 1) // meta.block_size  # [S]
    if num_pages.numel() and int(num_pages.max()) > block_tables.shape[1]:
        raise ValueError("block_tables has fewer columns than the longest sequence needs")
    indptr = torch.zeros(seq_lens.numel() + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(num_pages, 0)
    used = torch.arange(block_tables.shape[1])[None, :] < num_pages[:, None]  # [S, max_blocks]
    indices = block_tables[used].int()  # row-major: sequence by sequence, page by page
    if indices.numel() and int(indices.min()) < 0:
        raise ValueError("block_tables has a -1 entry inside a sequence's used pages")
    last_page_len = (seq_lens - (num_pages - 1).clamp_min(0) * meta.block_size).int()
    return indptr, indices, last_page_len


@dataclass
class FlashInferPlan:
    meta: AttentionMetadata
    wrapper: Any          # a planned BatchDecode/BatchPrefillWithPagedKVCacheWrapper


class _WrapperSet:
    """One decode and one prefill wrapper sharing a workspace."""

    def __init__(self, flashinfer, device: torch.device, use_tensor_cores: bool):
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_tensor_cores=use_tensor_cores)
        self.prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")


class FlashInferBackend:
    """Batch decode/prefill over the paged KV cache with FlashInfer; same interface as
    TorchAttentionBackend (prepare once per step, forward per layer)."""

    name = "flashinfer"

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device | str = "cuda"):
        import flashinfer  # CUDA-only dependency, imported on use

        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        use_tensor_cores = (num_heads // num_kv_heads) not in (1, 2, 4, 8)
        self._sets = [_WrapperSet(flashinfer, self.device, use_tensor_cores) for _ in range(2)]
        self._next = 0
        self._ahead: list[FlashInferPlan] = []  # the last two plans made (one per wrapper set)

    @classmethod
    def for_config(cls, config, device: torch.device | str = "cuda") -> "FlashInferBackend":
        """A backend sized for a ModelConfig (heads, head_dim, dtype)."""
        return cls(config.num_heads, config.num_kv_heads, config.head_dim, config.torch_dtype, device)

    def plan(self, meta: AttentionMetadata) -> FlashInferPlan:
        """Plan a step now (host work only); safe while the previous step runs."""
        indptr, indices, last_page_len = flashinfer_page_indices(meta)
        wrappers = self._sets[self._next]
        self._next = 1 - self._next
        is_decode = bool((meta.query_lens.cpu() == 1).all())
        common = dict(num_kv_heads=self.num_kv_heads, page_size=meta.block_size,
                      q_data_type=self.dtype, kv_data_type=self.dtype,
                      sm_scale=self.head_dim ** -0.5)
        indices = indices.to(self.device, non_blocking=True)
        if is_decode:
            wrappers.decode.plan(indptr, indices, last_page_len, num_qo_heads=self.num_heads,
                                 head_dim=self.head_dim, **common)
            plan = FlashInferPlan(meta, wrappers.decode)
        else:
            qo_indptr = meta.query_start_loc.cpu().int()
            wrappers.prefill.plan(qo_indptr, indptr, indices, last_page_len, num_qo_heads=self.num_heads,
                                  head_dim_qk=self.head_dim, causal=True, **common)
            plan = FlashInferPlan(meta, wrappers.prefill)
        self._ahead = [*self._ahead[-1:], plan]
        return plan

    def prepare(self, meta: AttentionMetadata) -> FlashInferPlan:
        for plan in self._ahead:
            if plan.meta is meta:
                return plan
        return self.plan(meta)

    def forward(self, plan: FlashInferPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        """q [T, H, D], k/v [T, Hkv, D] -> [T, H, D]; scale is fixed at plan time (head_dim^-0.5)."""
        if abs(scale - self.head_dim ** -0.5) > 1e-9:
            raise ValueError(f"FlashInferBackend plans sm_scale = head_dim^-0.5, got scale {scale}")
        store_kv(k, v, k_cache, v_cache, plan.meta.slot_mapping)
        return plan.wrapper.run(q.contiguous(), (k_cache, v_cache))
