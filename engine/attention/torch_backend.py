"""Paged attention in plain torch: the CPU backend and the reference for FlashInfer.

Layout and batch contract: engine/attention/metadata.py. Decode rows (one query token)
are attended in one padded batch; multi-token rows (prefill chunks) one sequence at a
time, each gathering exactly its seq_len cached tokens. Scores and softmax are fp32.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

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
    prefill: list[tuple[int, int, int, int]]  # (seq, first row, query_len, seq_len)


def plan_attention(meta: AttentionMetadata) -> TorchAttentionPlan:
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
        decode_valid=valid, prefill=prefill)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """One sequence's first seq_len cached tokens: cache [N, B, Hkv, D] -> [seq_len, Hkv, D]."""
    block_size = cache.shape[1]
    num_blocks = -(-seq_len // block_size)
    blocks = block_table[:num_blocks].long()
    return cache[blocks].flatten(0, 1)[:seq_len]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
            scale: float) -> torch.Tensor:
    """q [S, Q, H, D], k/v [S, L, Hkv, D], allowed bool [S, Q, L] -> [S, Q, H, D] (GQA)."""
    num_seqs, query_len, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    group = num_heads // num_kv_heads
    qg = q.view(num_seqs, query_len, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)  # [S, Hkv, G, Q, D]
    kt = k.permute(0, 2, 3, 1)[:, :, None]  # [S, Hkv, 1, D, L]
    scores = torch.matmul(qg.float(), kt.float()) * scale  # [S, Hkv, G, Q, L]
    scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    out = torch.matmul(probs, v.permute(0, 2, 1, 3)[:, :, None])  # [S, Hkv, G, Q, D]
    return out.permute(0, 3, 1, 2, 4).reshape(num_seqs, query_len, num_heads, head_dim)


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: TorchAttentionPlan,
            scale: float) -> torch.Tensor:
    """All one-token rows at once, keys padded to the longest: -> [S_d, H, D]."""
    max_len = plan.decode_valid.shape[1]
    k = k_cache[plan.decode_blocks].flatten(1, 2)[:, :max_len]  # [S_d, L, Hkv, D]
    v = v_cache[plan.decode_blocks].flatten(1, 2)[:, :max_len]
    v = v.masked_fill(~plan.decode_valid[:, :, None, None], 0)  # padding may hold garbage (NaN * 0 = NaN)
    out = _attend(q[plan.decode_rows][:, None], k, v, plan.decode_valid[:, None, :], scale)
    return out[:, 0]


def _prefill_one(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                 query_len: int, seq_len: int, scale: float) -> torch.Tensor:
    """q [Q, H, D] of one sequence, causal over its seq_len tokens -> [Q, H, D]."""
    k = gather_kv(k_cache, block_table, seq_len)  # [L, Hkv, D]
    v = gather_kv(v_cache, block_table, seq_len)
    query_pos = torch.arange(seq_len - query_len, seq_len, device=q.device)
    allowed = torch.arange(seq_len, device=q.device)[None, :] <= query_pos[:, None]  # [Q, L]
    return _attend(q[None], k[None], v[None], allowed[None], scale)[0]


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                    scale: float, plan: TorchAttentionPlan | None = None) -> torch.Tensor:
    """q [T, H, D] over the paged cache (this step's K/V already stored) -> [T, H, D]."""
    plan = plan if plan is not None else plan_attention(meta)
    out = torch.empty_like(q)
    if plan.decode_rows.numel():
        out[plan.decode_rows] = _decode(q, k_cache, v_cache, plan, scale)
    for seq, row, query_len, seq_len in plan.prefill:
        rows = slice(row, row + query_len)
        out[rows] = _prefill_one(q[rows], k_cache, v_cache, meta.block_tables[seq], query_len, seq_len, scale)
    return out


class TorchAttentionBackend:
    """The backend interface models call: prepare() once per step, forward() per layer."""

    name = "torch"

    def prepare(self, meta: AttentionMetadata) -> TorchAttentionPlan:
        return plan_attention(meta)

    def forward(self, plan: TorchAttentionPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        """q [T, H, D], k/v [T, Hkv, D]: store k/v, then attend -> [T, H, D]."""
        store_kv(k, v, k_cache, v_cache, plan.meta.slot_mapping)
        return paged_attention(q, k_cache, v_cache, plan.meta, scale, plan)
