"""Paged attention in plain torch: the CPU backend and the reference for FlashInfer.

Layout and batch contract: engine/attention/metadata.py. Decode rows (one query token)
are attended in one padded batch; multi-token rows (prefill chunks) one sequence at a
time, each gathering exactly its seq_len cached tokens. Scores and softmax are fp32.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attention.metadata import AttentionMetadata


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Write this step's k/v [T, Hkv, D] at their slots of k_cache/v_cache [N, B, Hkv, D]."""
    num_kv_heads, head_dim = k_cache.shape[-2:]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping.long(), k.to(k_cache.dtype))
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping.long(), v.to(v_cache.dtype))


@dataclass
class TorchAttentionPlan:
    """Host-side facts about one step, computed once and shared by every layer."""

    meta: AttentionMetadata
    decode_rows: torch.Tensor       # int64 [S_d] query rows of the sequences with one query token
    decode_blocks: torch.Tensor     # int64 [S_d, nb] their block tables (padding clamped to block 0)
    decode_valid: torch.Tensor      # bool [S_d, L] key t < seq_len (L = longest decode seq_len)
    zero_padding: bool              # zero gathered padding (caches that may hold NaN/inf garbage)
    prefill: list[tuple[int, int, int, int]]  # (seq, first row, query_len, seq_len)


def plan_attention(meta: AttentionMetadata, zero_padding: bool = True) -> TorchAttentionPlan:
    starts = meta.query_start_loc.tolist()
    seq_lens = meta.seq_lens.tolist()
    decode, prefill = [], []
    for i, seq_len in enumerate(seq_lens):
        query_len = starts[i + 1] - starts[i]
        if query_len > seq_len:
            raise ValueError(f"sequence {i}: {query_len} query tokens but seq_len {seq_len}")
        if query_len == 1:
            decode.append(i)
        elif query_len > 1:
            prefill.append((i, starts[i], query_len, seq_len))
    device = meta.seq_lens.device
    decode_seqs = torch.tensor(decode, dtype=torch.int64, device=device)
    max_len = max((seq_lens[i] for i in decode), default=0)
    num_blocks = -(-max_len // meta.block_size)
    valid = torch.arange(max_len, device=device)[None, :] < meta.seq_lens.long()[decode_seqs][:, None]
    return TorchAttentionPlan(
        meta=meta, decode_rows=torch.tensor([starts[i] for i in decode], dtype=torch.int64, device=device),
        decode_blocks=meta.block_tables[decode_seqs, :num_blocks].long().clamp_min(0),
        decode_valid=valid, zero_padding=zero_padding, prefill=prefill)


def gather_heads(cache: torch.Tensor, blocks: torch.Tensor, length: int) -> torch.Tensor:
    """Cached tokens of block rows, heads first (one copy, contiguous for attention):
    cache [N, B, Hkv, D], blocks int64 [S, nb] -> [S, Hkv, length, D]."""
    num_seqs, num_blocks = blocks.shape
    block_size, num_kv_heads, head_dim = cache.shape[1:]
    # index_select over whole blocks as rows: ~8x faster on CPU than advanced indexing
    rows = torch.index_select(cache.view(cache.shape[0], -1), 0, blocks.reshape(-1))
    gathered = rows.view(num_seqs, num_blocks, block_size, num_kv_heads, head_dim).permute(0, 3, 1, 2, 4)
    return gathered.reshape(num_seqs, num_kv_heads, num_blocks * block_size, head_dim)[:, :, :length]


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One sequence's first seq_len cached tokens: cache [N, B, Hkv, D] -> [seq_len, Hkv, D]."""
    num_blocks = -(-seq_len // cache.shape[1])
    return gather_heads(cache, block_table[None, :num_blocks].long(), seq_len)[0].transpose(0, 1)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
            scale: float) -> torch.Tensor:
    """q [S, Q, H, D], k/v [S, Hkv, L, D], allowed bool [S, Q, L] -> [S, Q, H, D] (GQA).

    torch's fused SDPA: scores and softmax accumulate in fp32 on CPU."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=allowed[:, None], scale=scale,
                                         enable_gqa=True)  # [S, H, Q, D]
    return out.transpose(1, 2)


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TorchAttentionPlan,
            scale: float) -> torch.Tensor:
    """All one-token rows at once, keys padded to the longest: -> [S_d, H, D]."""
    max_len = plan.decode_valid.shape[1]
    k = gather_heads(k_cache, plan.decode_blocks, max_len)  # [S_d, Hkv, L, D]
    v = gather_heads(v_cache, plan.decode_blocks, max_len)
    if plan.zero_padding:  # masked keys still enter q.k and p.v: NaN garbage would poison both
        invalid = ~plan.decode_valid[:, None, :, None]
        k.masked_fill_(invalid, 0)
        v.masked_fill_(invalid, 0)
    # An additive mask (0 / -inf) built once per call: SDPA's CPU kernel runs ~25% faster
    # with it than with a boolean mask on these shapes.
    bias = torch.zeros(plan.decode_valid.shape, dtype=q.dtype).masked_fill_(~plan.decode_valid, float("-inf"))
    out = F.scaled_dot_product_attention(q[plan.decode_rows][:, :, None], k, v, attn_mask=bias[:, None, None, :],
                                         scale=scale, enable_gqa=True)  # [S_d, H, 1, D]
    return out[:, :, 0]


def _prefill_one(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 query_len: int, seq_len: int, scale: float) -> torch.Tensor:
    """q [Q, H, D] of one sequence, causal over its seq_len tokens -> [Q, H, D]."""
    blocks = block_table[None, : -(-seq_len // k_cache.shape[1])].long()
    k = gather_heads(k_cache, blocks, seq_len)  # [1, Hkv, L, D]
    v = gather_heads(v_cache, blocks, seq_len)
    query_pos = torch.arange(seq_len - query_len, seq_len, device=q.device)
    allowed = torch.arange(seq_len, device=q.device)[None, :] <= query_pos[:, None]  # [Q, L]
    return _attend(q[None], k, v, allowed[None], scale)[0]


def _fresh_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """A sequence with nothing cached attends only to this step's own k/v: causal SDPA
    straight on them, no gather. q [Q, H, D], k/v [Q, Hkv, D] -> [Q, H, D]."""
    out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                         is_causal=True, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                    scale: float, plan: TorchAttentionPlan | None = None, k: torch.Tensor | None = None,
                    v: torch.Tensor | None = None) -> torch.Tensor:
    """q [T, H, D] over the paged cache (this step's K/V already stored) -> [T, H, D].
    With this step's k/v [T, Hkv, D], fresh prefills skip the cache."""
    plan = plan if plan is not None else plan_attention(meta)
    out = torch.empty_like(q)
    if plan.decode_rows.numel():
        out[plan.decode_rows] = _decode(q, k_cache, v_cache, plan, scale)
    for seq, row, query_len, seq_len in plan.prefill:
        rows = slice(row, row + query_len)
        if k is not None and query_len == seq_len:
            out[rows] = _fresh_prefill(q[rows], k[rows], v[rows], scale)
        else:
            out[rows] = _prefill_one(q[rows], k_cache, v_cache, meta.block_tables[seq], query_len, seq_len, scale)
    return out


class TorchAttentionBackend:
    """The backend interface models call: prepare() once per step, forward() per layer.

    zero_padding=False skips zeroing the padded keys/values of decode batches: safe
    (and ~25% faster here) when the caches start zeroed and only ever hold values the
    model wrote, as the engine's ModelRunner guarantees; masked keys then only ever
    hold finite numbers."""

    name = "torch"

    def __init__(self, zero_padding: bool = True) -> None:
        self.zero_padding = zero_padding

    def prepare(self, meta: AttentionMetadata) -> TorchAttentionPlan:
        return plan_attention(meta, self.zero_padding)

    def forward(self, plan: TorchAttentionPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        """q [T, H, D], k/v [T, Hkv, D]: store k/v, then attend -> [T, H, D]."""
        store_kv(k, v, k_cache, v_cache, plan.meta.slot_mapping)
        return paged_attention(q, k_cache, v_cache, plan.meta, scale, plan, k, v)
