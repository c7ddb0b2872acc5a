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

    def __post_init__(self) -> None:
        num_seqs = self.seq_lens.numel()
        if self.query_start_loc.numel() != num_seqs + 1:
            raise ValueError(f"query_start_loc has {self.query_start_loc.numel()} entries for {num_seqs} sequences")
        if self.slot_mapping.numel() != int(self.query_start_loc[-1]):
            raise ValueError("slot_mapping must have one slot per query token")

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
