"""What one engine step tells attention about its batch (the contract between the
model runner, the models and the attention backends).

Sequences are laid out back to back: sequence i's query tokens this step are rows
query_start_loc[i]:query_start_loc[i+1] of q/k/v ([T, H, D], T = total query tokens).
Sequence i attends to seq_lens[i] tokens: the cached ones plus its query tokens; its
query token j sits at position seq_lens[i] - query_len_i + j (causal within the step).

KV cache of one layer: two tensors k_cache, v_cache of shape
[num_blocks, block_size, num_kv_heads, head_dim]; token t of sequence i lives in block
block_tables[i][t // block_size] at offset t % block_size. slot_mapping[r] =
block * block_size + offset is where the K/V of query row r are written.

Optional step features (None, the default: causal everywhere, every K/V stored; the
backends then run exactly the paths they run without them):
- segment_ids int32 [T]: per query row, 0 = causal; rows of one sequence sharing a
  non-zero id also attend to each other both ways (an image's tokens). The rule and the
  masks: engine/attention/masks.py.
- write_kv bool [num_seqs]: False = the sequence's query tokens attend to its cached
  tokens and to each other, but their K/V are not stored and the pool is left unchanged
  (guidance branches reading a shared context); their slot_mapping entries are ignored
  (-1 by convention). The torch backend implements it; FlashInfer refuses it at plan time.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]
    seq_lens: torch.Tensor         # int32 [num_seqs]
    block_tables: torch.Tensor     # int32 [num_seqs, max_blocks_per_seq], -1 padded
    slot_mapping: torch.Tensor     # int64 [T]
    block_size: int
    segment_ids: torch.Tensor | None = None  # int32 [T]; None: causal everywhere
    write_kv: torch.Tensor | None = None     # bool [num_seqs]; None: every sequence stores its K/V

    def __post_init__(self) -> None:
        num_seqs = self.seq_lens.numel()
        if self.query_start_loc.numel() != num_seqs + 1:
            raise ValueError(f"query_start_loc has {self.query_start_loc.numel()} entries for {num_seqs} sequences")
        if self.slot_mapping.numel() != int(self.query_start_loc[-1]):
            raise ValueError("slot_mapping must have one slot per query token")
        if self.segment_ids is not None and self.segment_ids.numel() != self.slot_mapping.numel():
            raise ValueError("segment_ids must have one id per query token")
        if self.write_kv is not None and self.write_kv.numel() != num_seqs:
            raise ValueError("write_kv must have one flag per sequence")

    @property
    def has_features(self) -> bool:
        """Segments or no-write sequences: the backends' general paths."""
        return self.segment_ids is not None or self.write_kv is not None

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.numel()

    @property
    def query_lens(self) -> torch.Tensor:
        return self.query_start_loc[1:] - self.query_start_loc[:-1]

    @property
    def last_token_rows(self) -> torch.Tensor:
        """Row of each sequence's last query token (where its next-token logits come from)."""
        return self.query_start_loc[1:].long() - 1
