"""FlashInfer attention over the paged KV cache (CUDA only).

Importing this module does not import flashinfer: only FlashInferBackend's constructor
does. `flashinfer_page_indices` and `PageTable` are pure torch and run anywhere; CPU
tests check that the arrays they build describe exactly the KV the torch backend reads.

KV layout: FlashInfer's "NHD" paged layout is ours, [num_pages, page_size, Hkv, D] per
tensor, so k_cache/v_cache are handed over as the (k, v) tuple without copies.

Planning: a FlashInfer plan depends only on the step's page table (PageTable: query
rows per sequence, pages, last-page fill), never on the K/V values or token ids. The
engine launches step N, then calls `plan_ahead(predicted metadata of N+1)` while N's
kernels run (engine/plan_ahead.py predicts it); when step N+1 comes, `plan(meta,
host_meta)` reuses that plan if its page table is equal and plans now otherwise.
Plans alternate between two wrapper sets (each with its own workspace and pinned
host staging buffer), so a plan made ahead never writes buffers the in-flight step
reads. `prepare(meta)` (called by the model at the start of a forward) returns the
plan made for that same metadata object, or plans now.

Step features (AttentionMetadata): segment_ids become FlashInfer's custom mask on the
prefill plan (engine/attention/masks.py builds it, the same keys the torch backend
attends; a step without a multi-token segment plans the causal kernels as before).
write_kv with a sequence that does not store is refused at plan time
(NotImplementedError): FlashInfer reads keys only from the pages, so a no-write
sequence would need its own ragged keys merged with the paged prefix; until then such
steps run on the torch backend, or on a forked context that is released afterwards.

Contract (engine/cuda_runner.py keeps it: it reads every step's logits back before it
plans the next step): plan() is called with no step in flight, plan_ahead() with at
most one, the step plan() planned last.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from engine.attention.masks import flat_custom_mask
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
class PageTable:
    """Everything a FlashInfer plan depends on, as host int32 tensors."""

    is_decode: bool                # every sequence has one query token
    qo_indptr: torch.Tensor        # [S + 1] query rows of sequence i: qo_indptr[i]:qo_indptr[i+1]
    indptr: torch.Tensor           # [S + 1]
    indices: torch.Tensor          # [nnz_pages]
    last_page_len: torch.Tensor    # [S]
    block_size: int
    custom_mask: torch.Tensor | None = None  # bool [sum_i Q_i * L_i] (segments); None: causal

    @classmethod
    def of(cls, meta: AttentionMetadata) -> "PageTable":
        """From host metadata (device metadata works too, at the cost of a sync)."""
        if meta.write_kv is not None and not bool(meta.write_kv.all()):
            raise NotImplementedError("FlashInferBackend: AttentionMetadata.write_kv=False (attending to a step's "
                                      "K/V without storing them) is not implemented; use the torch backend")
        qo_indptr = meta.query_start_loc.cpu().int()
        indptr, indices, last_page_len = flashinfer_page_indices(meta)
        is_decode = int(qo_indptr[-1]) == meta.num_seqs
        custom_mask = None if meta.segment_ids is None or is_decode else flat_custom_mask(meta)
        return cls(is_decode, qo_indptr, indptr, indices, last_page_len, meta.block_size, custom_mask)

    def same_as(self, other: "PageTable") -> bool:
        if self.custom_mask is not None or other.custom_mask is not None:
            if self.custom_mask is None or other.custom_mask is None or not torch.equal(self.custom_mask,
                                                                                        other.custom_mask):
                return False
        return (self.is_decode == other.is_decode and self.block_size == other.block_size
                and all(torch.equal(a, b) for a, b in ((self.qo_indptr, other.qo_indptr), (self.indptr, other.indptr),
                                                        (self.indices, other.indices),
                                                        (self.last_page_len, other.last_page_len))))


@dataclass
class FlashInferPlan:
    meta: AttentionMetadata   # the step's metadata; forward() reads its slot_mapping (on the KV's device)
    wrapper: Any              # a planned BatchDecode/BatchPrefillWithPagedKVCacheWrapper


@dataclass
class _Ahead:
    table: PageTable
    set_index: int
    wrapper: Any


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

        self._flashinfer = flashinfer
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        # FlashInfer's CUDA-core decode kernels cover these group sizes; others take the
        # tensor-core (prefill) kernels.
        self.use_tensor_cores = (num_heads // num_kv_heads) not in (1, 2, 4, 8)
        self._sets = [_WrapperSet(flashinfer, self.device, self.use_tensor_cores) for _ in range(2)]
        self._launched = 1              # wrapper set of the step planned last (in flight once launched)
        self._ahead: _Ahead | None = None
        self._current: FlashInferPlan | None = None
        self.num_plans = self.num_reused = 0  # plans made, and steps that used a plan made ahead

    @classmethod
    def for_config(cls, config, device: torch.device | str = "cuda",
                   dtype: torch.dtype | None = None) -> "FlashInferBackend":
        """A backend sized for a ModelConfig (heads, head_dim; dtype defaults to the config's)."""
        return cls(config.num_heads, config.num_kv_heads, config.head_dim, dtype or config.torch_dtype, device)

    def plan(self, meta: AttentionMetadata, host_meta: AttentionMetadata | None = None) -> FlashInferPlan:
        """The plan of the step about to launch. meta: its metadata as the model will get it
        (slot_mapping on the KV's device); host_meta: the same on the host (the plan's index
        arrays come from it without a device sync). Reuses the plan made ahead when its page
        table is equal."""
        table = PageTable.of(host_meta if host_meta is not None else meta)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.table.same_as(table):
            set_index, wrapper = ahead.set_index, ahead.wrapper
            self.num_reused += 1
        else:
            set_index = 1 - self._launched
            wrapper = self._plan_into(set_index, table)
        self._launched = set_index
        self._current = FlashInferPlan(meta, wrapper)
        return self._current

    def plan_ahead(self, host_meta: AttentionMetadata) -> None:
        """Plan a likely next step (host metadata) into the wrapper set the step in flight
        does not use; plan() picks it up if the next step's page table is the same."""
        table = PageTable.of(host_meta)
        set_index = 1 - self._launched
        self._ahead = _Ahead(table, set_index, self._plan_into(set_index, table))

    def prepare(self, meta: AttentionMetadata) -> FlashInferPlan:
        if self._current is not None and self._current.meta is meta:
            return self._current
        return self.plan(meta)

    def plan_kwargs(self, block_size: int) -> dict:
        """The arguments every plan of this backend shares (the decode wrappers' names)."""
        return dict(num_qo_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                    page_size=block_size, q_data_type=self.dtype, kv_data_type=self.dtype,
                    sm_scale=self.head_dim ** -0.5)

    def _plan_into(self, set_index: int, table: PageTable) -> Any:
        """Plan `table` into wrapper set `set_index`; returns the planned wrapper."""
        wrappers = self._sets[set_index]
        self.num_plans += 1
        kwargs = self.plan_kwargs(table.block_size)
        indices = table.indices.to(self.device, non_blocking=True)
        if table.is_decode:
            wrappers.decode.plan(table.indptr, indices, table.last_page_len, **kwargs)
            return wrappers.decode
        kwargs["head_dim_qk"] = kwargs.pop("head_dim")
        if table.custom_mask is not None:  # bidirectional segments: FlashInfer then ignores `causal`
            kwargs["custom_mask"] = table.custom_mask.to(self.device, non_blocking=True)
        wrappers.prefill.plan(table.qo_indptr, table.indptr, indices, table.last_page_len,
                              causal=table.custom_mask is None, **kwargs)
        return wrappers.prefill

    def graph_decode_wrapper(self, batch_size: int, max_pages: int, workspace: torch.Tensor) -> Any:
        """A decode wrapper for a CUDA graph of `batch_size` sequences: its page-table buffers
        (indptr [B + 1], indices [max_pages], last_page_len [B]) have fixed addresses that a
        captured graph reads; plan_decode() refills them before every replay."""
        def buffer(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.int32, device=self.device)

        return self._flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_cuda_graph=True, use_tensor_cores=self.use_tensor_cores,
            paged_kv_indptr_buffer=buffer(batch_size + 1), paged_kv_indices_buffer=buffer(max_pages),
            paged_kv_last_page_len_buffer=buffer(batch_size))

    def plan_decode(self, wrapper: Any, table: PageTable) -> None:
        """Plan a decode step into `wrapper` (a graph_decode_wrapper; host work plus small
        copies queued on the current stream, so after the step before it)."""
        if not table.is_decode:
            raise ValueError("plan_decode: the page table is not a decode step")
        wrapper.plan(table.indptr, table.indices, table.last_page_len, **self.plan_kwargs(table.block_size))

    def forward(self, plan: FlashInferPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        """q [T, H, D], k/v [T, Hkv, D] -> [T, H, D]; scale is fixed at plan time (head_dim^-0.5)."""
        if abs(scale - self.head_dim ** -0.5) > 1e-9:
            raise ValueError(f"FlashInferBackend plans sm_scale = head_dim^-0.5, got scale {scale}")
        store_kv(k, v, k_cache, v_cache, plan.meta.slot_mapping)
        return plan.wrapper.run(q.contiguous(), (k_cache, v_cache))
