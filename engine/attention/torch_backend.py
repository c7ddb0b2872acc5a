"""Paged attention in plain torch: the CPU backend and the reference for FlashInfer.

Layout and batch contract: engine/attention/metadata.py. Decode rows (one query token)
are attended in padded batches of similar length (engine/attention/torch_plan.py);
multi-token rows (prefill chunks) one sequence at a time, each gathering exactly its
seq_len cached tokens. Scores and softmax are fp32.

Sequences with a bidirectional segment or that do not store their K/V (the metadata's
segment_ids / write_kv) are attended one at a time with their explicit mask
(`_masked_one`); the compiled decode kernel and the decode groups keep the rest.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention.metadata import AttentionMetadata
from engine.attention import cpu_kernels
from engine.attention.torch_plan import DecodeGroup, GatherBuffers, MaskedSeq, TorchAttentionPlan, plan_attention

__all__ = ["TorchAttentionBackend", "TorchAttentionPlan", "gather_kv", "paged_attention", "plan_attention",
           "store_kv"]


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Write this step's k/v [T, Hkv, D] at their slots of k_cache/v_cache [N, B, Hkv, D]."""
    num_kv_heads, head_dim = k_cache.shape[-2:]
    slot_mapping = slot_mapping if slot_mapping.dtype == torch.int64 else slot_mapping.long()
    if k.dtype != k_cache.dtype:
        k, v = k.to(k_cache.dtype), v.to(v_cache.dtype)
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k)
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v)


def gather_blocks(cache: torch.Tensor, blocks: torch.Tensor, num_seqs: int,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Whole cached blocks, token-major (one copy): cache [N, B, Hkv, D], blocks int64
    [num_seqs * nb] -> [num_seqs, nb * B, Hkv, D]. SDPA reads it through a heads-first view.
    out: a reused flat buffer of at least that many elements."""
    width = cache.stride(0)  # elements per block
    if out is not None:
        out = out[: blocks.numel() * width].view(-1, width)
    # index_select over whole blocks as rows: ~8x faster on CPU than advanced indexing
    rows = torch.index_select(cache.view(cache.shape[0], width), 0, blocks, out=out)
    return rows.view(num_seqs, -1, *cache.shape[2:])


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One sequence's first seq_len cached tokens: cache [N, B, Hkv, D] -> [seq_len, Hkv, D]."""
    num_blocks = -(-seq_len // cache.shape[1])
    return gather_blocks(cache, block_table[:num_blocks].long(), 1)[0, :seq_len]


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TorchAttentionPlan,
            group: DecodeGroup, scale: float) -> torch.Tensor:
    """One group of one-token rows, keys padded to its longest: q [T, H, D] -> [n, H, D]."""
    num_seqs, max_len = group.valid.shape
    k_buf, v_buf = plan.gather_buffers(group.blocks.numel() * k_cache.stride(0), k_cache)
    k = gather_blocks(k_cache, group.blocks, num_seqs, k_buf)[:, :max_len]  # [n, L, Hkv, D]
    v = gather_blocks(v_cache, group.blocks, num_seqs, v_buf)[:, :max_len]
    if plan.zero_padding:  # masked keys still enter q.k and p.v: NaN garbage would poison both
        invalid = ~group.valid[:, :, None, None]
        k.masked_fill_(invalid, 0)
        v.masked_fill_(invalid, 0)
    q = q if group.rows is None else q[group.rows]
    # k/v as strided heads-first views [n, Hkv, L, D]: SDPA's CPU kernel reads strides,
    # which saves a second copy of every gathered key and value.
    out = F.scaled_dot_product_attention(q[:, :, None], k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=group.bias(q.dtype), scale=scale, enable_gqa=True)
    return out[:, :, 0]  # [n, H, 1, D] -> [n, H, D]


def _prefill_one(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 query_len: int, seq_len: int, scale: float) -> torch.Tensor:
    """q [Q, H, D] of one sequence, causal over its seq_len tokens -> [Q, H, D]."""
    k = gather_kv(k_cache, block_table, seq_len).transpose(0, 1)[None]  # [1, Hkv, L, D]
    v = gather_kv(v_cache, block_table, seq_len).transpose(0, 1)[None]
    query_pos = torch.arange(seq_len - query_len, seq_len, device=q.device)
    allowed = torch.arange(seq_len, device=q.device)[None, :] <= query_pos[:, None]  # [Q, L]
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k, v, attn_mask=allowed[None, None],
                                         scale=scale, enable_gqa=True)  # [1, H, Q, D]
    return out[0].transpose(0, 1)


def _fresh_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """A sequence with nothing cached attends only to this step's own k/v: causal SDPA
    straight on them, no gather. q [Q, H, D], k/v [Q, Hkv, D] -> [Q, H, D]."""
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         is_causal=True, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)


def _masked_one(q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None, k_cache: torch.Tensor,
                v_cache: torch.Tensor, block_table: torch.Tensor, seq: MaskedSeq, scale: float) -> torch.Tensor:
    """One MaskedSeq: q [T, H, D] of the step -> its rows [Q, H, D]. Keys: its cached prefix
    from the pool, then this step's own k/v [T, Hkv, D] (cast to the cache's dtype, as a
    stored and re-read key would be), so a sequence that does not store reads what a
    storing one would; without k/v (an already stored sequence) all keys from the pool."""
    rows = slice(seq.row, seq.row + seq.query_len)
    cached = seq.seq_len - seq.query_len
    if k is None:
        if not seq.stores:
            raise ValueError(f"sequence {seq.seq} does not store its K/V: attention needs this step's k/v")
        keys, values = gather_kv(k_cache, block_table, seq.seq_len), gather_kv(v_cache, block_table, seq.seq_len)
    else:
        keys, values = k[rows].to(k_cache.dtype), v[rows].to(v_cache.dtype)  # [Q, Hkv, D]
        if cached:
            keys = torch.cat((gather_kv(k_cache, block_table, cached), keys))  # [L, Hkv, D]
            values = torch.cat((gather_kv(v_cache, block_table, cached), values))
    mask = None if seq.mask is None else seq.mask[None, None]  # [1, 1, Q, L]
    out = F.scaled_dot_product_attention(q[rows].transpose(0, 1)[None], keys.transpose(0, 1)[None],
                                         values.transpose(0, 1)[None], attn_mask=mask, scale=scale,
                                         enable_gqa=True)  # [1, H, Q, D]
    return out[0].transpose(0, 1)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                    scale: float, plan: TorchAttentionPlan | None = None, k: torch.Tensor | None = None,
                    v: torch.Tensor | None = None) -> torch.Tensor:
    """q [T, H, D] over the paged cache (this step's K/V already stored) -> [T, H, D].
    With this step's k/v [T, Hkv, D], fresh prefills skip the cache; sequences that do not
    store their K/V (meta.write_kv) need them."""
    plan = plan if plan is not None else plan_attention(meta)
    if plan.decode_only:
        return _decode(q, k_cache, v_cache, plan, plan.decode[0], scale)
    kernel = plan.kernel
    if kernel is not None and kernel.rows is None:  # a decode-only step
        return cpu_kernels.paged_decode()(q, k_cache, v_cache, kernel.block_tables, kernel.seq_lens, scale)
    out = torch.empty_like(q)
    if kernel is not None:
        out[kernel.rows] = cpu_kernels.paged_decode()(q[kernel.rows], k_cache, v_cache, kernel.block_tables,
                                                      kernel.seq_lens, scale)
    for group in plan.decode:
        out[group.rows] = _decode(q, k_cache, v_cache, plan, group, scale)
    for seq, row, query_len, seq_len in plan.prefill:
        rows = slice(row, row + query_len)
        if k is not None and query_len == seq_len:
            out[rows] = _fresh_prefill(q[rows], k[rows], v[rows], scale)
        else:
            out[rows] = _prefill_one(q[rows], k_cache, v_cache, meta.block_tables[seq], query_len, seq_len, scale)
    for masked in plan.masked:
        out[masked.row:masked.row + masked.query_len] = _masked_one(q, k, v, k_cache, v_cache,
                                                                    meta.block_tables[masked.seq], masked, scale)
    return out


class TorchAttentionBackend:
    """The backend interface models call: prepare() once per step, forward() per layer.

    zero_padding=False skips zeroing the padded keys/values of decode batches: safe
    (and ~25% faster here) when the caches start zeroed and only ever hold values the
    model wrote, as the engine's ModelRunner guarantees; masked keys then only ever
    hold finite numbers.

    reuse_buffers=True lets every layer and step gather decode keys/values into the same
    two buffers: for an owner that runs one step at a time (ModelRunner, CodePredictor).

    use_kernel: one-token rows go to the compiled CPU kernel (engine/attention/cpu_kernels.py)
    when it is available (None: whenever it is; False: never, the plain torch path)."""

    name = "torch"

    def __init__(self, zero_padding: bool = True, reuse_buffers: bool = False, use_kernel: bool | None = None) -> None:
        self.zero_padding = zero_padding
        self.buffers = GatherBuffers() if reuse_buffers else None
        self.use_kernel = use_kernel is not False and cpu_kernels.paged_decode() is not None

    def prepare(self, meta: AttentionMetadata) -> TorchAttentionPlan:
        return plan_attention(meta, self.zero_padding, self.buffers, self.use_kernel)

    def forward(self, plan: TorchAttentionPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        """q [T, H, D], k/v [T, Hkv, D]: store k/v (the rows that store), then attend -> [T, H, D]."""
        if plan.store_rows is None:
            store_kv(k, v, k_cache, v_cache, plan.slot_mapping)
        elif plan.store_rows.numel():
            store_kv(k[plan.store_rows], v[plan.store_rows], k_cache, v_cache, plan.slot_mapping)
        return paged_attention(q, k_cache, v_cache, plan.meta, scale, plan, k, v)
