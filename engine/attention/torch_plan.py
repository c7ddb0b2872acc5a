"""The torch backend's per-step plan: what every layer of a step shares, built once.

Decode rows (one query token) are attended in padded batches: every sequence of a batch
is gathered up to the batch's longest seq_len, and SDPA computes the masked padding too.
With lengths spread from tens to hundreds of tokens, one batch would pay for ~2x the
keys it needs, so decodes are split into groups of similar length wherever the padding
saved outweighs another round of per-call overhead.

Steps with features (AttentionMetadata.segment_ids / write_kv) plan their affected
sequences as `MaskedSeq`s, attended one at a time with an explicit mask: a multi-token
query with a bidirectional segment, and every sequence that does not store its K/V
(its keys are the cached prefix plus this step's own k/v, never the pool). The other
sequences of the step keep their usual paths (decode groups, the compiled kernel,
causal prefill); a step without features plans exactly as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.attention.masks import sequence_mask, sequence_masks
from engine.attention.metadata import AttentionMetadata

# What one more decode group costs (two gathers, an SDPA call and row indexing per layer),
# in padded keys: measured on bench.thinker's shapes (fp32, 64-dim heads, one CPU thread),
# 512 beat 256 and no grouping, ~10% per 32-sequence decode step, and matched 768.
GROUP_OVERHEAD_KEYS = 512


class GatherBuffers:
    """Two flat buffers (keys, values) the decode gathers of every layer and step reuse,
    grown on demand: a fresh multi-MB tensor per gather costs ~30% more (page faults)."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def get(self, numel: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None or self.k.numel() < numel or self.k.dtype != like.dtype or self.k.device != like.device:
            self.k, self.v = (torch.empty(numel, dtype=like.dtype, device=like.device) for _ in range(2))
        return self.k, self.v


@dataclass
class DecodeGroup:
    """Decode sequences attended as one padded batch."""

    rows: torch.Tensor | None  # int64 [n] their query rows; None: every row of the step, in order
    blocks: torch.Tensor       # int64 [n * nb] their block tables, flattened (padding -> block 0)
    valid: torch.Tensor        # bool [n, L] key t < seq_len (L = the group's longest seq_len)
    _bias: dict = field(default_factory=dict)  # dtype -> additive mask [n, 1, 1, L]

    def bias(self, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask (0 where allowed, -inf past seq_len) [n, 1, 1, L]: SDPA's CPU kernel
        runs ~20% faster with it than with a boolean mask. Built by the first layer only."""
        if dtype not in self._bias:
            bias = torch.zeros(self.valid.shape, dtype=dtype, device=self.valid.device).masked_fill_(~self.valid, float("-inf"))
            self._bias[dtype] = bias[:, None, None, :]
        return self._bias[dtype]


@dataclass
class KernelDecode:
    """Decode rows for the compiled kernel (engine/attention/cpu_kernels.py): it reads each
    sequence's blocks in place, so no gather, no padding and no length groups."""

    rows: torch.Tensor | None   # int64 [n] their query rows; None: every row of the step, in order
    block_tables: torch.Tensor  # int32 [n, W] -1 padded
    seq_lens: torch.Tensor      # int32 [n]


@dataclass
class MaskedSeq:
    """A sequence attended on its own with an explicit mask (segments or no write)."""

    seq: int
    row: int                   # its first query row
    query_len: int
    seq_len: int
    mask: torch.Tensor | None  # bool [Q, L]; None: one query token, every key allowed
    stores: bool               # False: its keys are the cached prefix + this step's k/v


@dataclass
class TorchAttentionPlan:
    """Host-side facts about one step, computed once and shared by every layer."""

    meta: AttentionMetadata
    decode: list[DecodeGroup]       # the step's one-token sequences, in groups of similar length
    zero_padding: bool              # zero gathered padding (caches that may hold NaN/inf garbage)
    prefill: list[tuple[int, int, int, int]]  # (seq, first row, query_len, seq_len)
    slot_mapping: torch.Tensor      # int64 [T] meta.slot_mapping
    buffers: GatherBuffers | None = None  # the backend's, reused; None: fresh tensors per gather
    kernel: KernelDecode | None = None    # the decode rows, when the compiled kernel attends them
    masked: list[MaskedSeq] = field(default_factory=list)  # sequences with segments or without a write
    store_rows: torch.Tensor | None = None  # int64 [n] rows whose K/V are stored (slot_mapping is theirs); None: all

    @property
    def decode_only(self) -> bool:
        """One group holding every row of the step: its output is the step's output."""
        return len(self.decode) == 1 and self.decode[0].rows is None

    def gather_buffers(self, numel: int, like: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        return (None, None) if self.buffers is None else self.buffers.get(numel, like)


def group_by_length(seqs: list[int], seq_lens: list[int], overhead: int = GROUP_OVERHEAD_KEYS) -> list[list[int]]:
    """Split sequences into groups of similar seq_len (each padded to its group's longest).

    Walking down the lengths, a new group starts where the padding it saves the rest,
    (group max - this length) x sequences left, exceeds twice a group's `overhead` (half
    of that saving would also come from later splits). O(S), and on random lengths within
    ~7% of the optimal grouping's cost (an O(S^2) dynamic program, too slow per step in
    Python); one group for all costs ~36% more."""
    order = sorted(seqs, key=lambda i: -seq_lens[i])
    groups: list[list[int]] = []
    for n, i in enumerate(order):
        if not groups or (seq_lens[groups[-1][0]] - seq_lens[i]) * (len(order) - n) > 2 * overhead:
            groups.append([])
        groups[-1].append(i)
    return groups


def _decode_group(meta: AttentionMetadata, seqs: list[int] | None, starts: list[int],
                  seq_lens: list[int]) -> DecodeGroup:
    """seqs None: every sequence of the step, each one row, in order (no row indexing)."""
    device = meta.seq_lens.device
    max_len = max(seq_lens) if seqs is None else max(seq_lens[i] for i in seqs)
    num_blocks = -(-max_len // meta.block_size)
    if seqs is None:
        rows, blocks, lens = None, meta.block_tables[:, :num_blocks], meta.seq_lens
    else:
        index = torch.tensor(seqs, dtype=torch.int64, device=device)
        rows = torch.tensor([starts[i] for i in seqs], dtype=torch.int64, device=device)
        blocks, lens = meta.block_tables[index, :num_blocks], meta.seq_lens[index]
    valid = torch.arange(max_len, device=device)[None, :] < lens[:, None]  # [n, L]
    return DecodeGroup(rows, blocks.long().clamp_min(0).reshape(-1), valid)


def _kernel_decode(meta: AttentionMetadata, decode: list[int]) -> KernelDecode:
    if len(decode) == meta.num_seqs:
        return KernelDecode(None, meta.block_tables, meta.seq_lens)
    index = torch.tensor(decode, dtype=torch.int64)
    rows = meta.query_start_loc[:-1].long()[index]
    return KernelDecode(rows, meta.block_tables[index], meta.seq_lens[index])


def plan_attention(meta: AttentionMetadata, zero_padding: bool = True, buffers: GatherBuffers | None = None,
                   kernel: bool = False) -> TorchAttentionPlan:
    """kernel: the compiled decode kernel attends the one-token rows (CPU tensors only)."""
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
    masked, store_rows = _feature_plan(meta, starts, seq_lens) if meta.has_features else ([], None)
    if masked:
        apart = {m.seq for m in masked}
        decode = [i for i in decode if i not in apart]
        prefill = [p for p in prefill if p[0] not in apart]
    slot_mapping = meta.slot_mapping.long()
    if store_rows is not None:
        slot_mapping = slot_mapping[store_rows.to(slot_mapping.device)]
    common = dict(meta=meta, zero_padding=zero_padding, prefill=prefill, slot_mapping=slot_mapping, buffers=buffers,
                  masked=masked, store_rows=store_rows)
    if kernel and decode and meta.seq_lens.device.type == "cpu":
        return TorchAttentionPlan(decode=[], kernel=_kernel_decode(meta, decode), **common)
    groups = group_by_length(decode, seq_lens) if decode else []
    if len(groups) == 1 and len(decode) == len(seq_lens):
        groups = [None]  # decode-only step in one group: natural order, no row indexing
    return TorchAttentionPlan(decode=[_decode_group(meta, g, starts, seq_lens) for g in groups], **common)


def _feature_plan(meta: AttentionMetadata, starts: list[int],
                  seq_lens: list[int]) -> tuple[list[MaskedSeq], torch.Tensor | None]:
    """A step with features: its MaskedSeqs, and the rows whose K/V are stored (None: all)."""
    masks = sequence_masks(meta)
    writes = [True] * meta.num_seqs if meta.write_kv is None else [bool(w) for w in meta.write_kv.tolist()]
    masked = []
    for i, seq_len in enumerate(seq_lens):
        query_len = starts[i + 1] - starts[i]
        if query_len == 0 or (i not in masks and writes[i]):
            continue
        mask = masks.get(i)
        if mask is None and query_len > 1:  # a causal sequence that does not store its K/V
            mask = sequence_mask(torch.zeros(query_len, dtype=torch.int32, device=meta.seq_lens.device), seq_len)
        masked.append(MaskedSeq(i, starts[i], query_len, seq_len, mask, writes[i]))
    store_rows = None
    if not all(writes):
        query_lens = torch.tensor([starts[i + 1] - starts[i] for i in range(meta.num_seqs)])
        row_writes = torch.repeat_interleave(torch.tensor(writes), query_lens)  # [T]
        store_rows = row_writes.nonzero().flatten().to(meta.seq_lens.device)
    return masked, store_rows
