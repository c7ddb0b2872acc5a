"""Runs one scheduled batch through the model over the paged KV cache.

Owns the KV tensors (one k/v pair per layer, [num_blocks, block_size, Hkv, D]) and
turns a ScheduledBatch into the flat inputs + AttentionMetadata of one forward.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention.metadata import AttentionMetadata


@dataclass
class ForwardOutput:
    logits: torch.Tensor            # [num_sampled, vocab] fp32: rows of sequences that sample this step
    sampled_hidden: torch.Tensor | None = None  # [num_sampled, hidden] final normed hidden of those rows
    hidden: list | None = None      # per sequence: [q_i, hidden] captured layer states of its query tokens
    embeds: list | None = None      # per sequence: [q_i, hidden] input embeddings of its query tokens


class ModelRunner:
    def __init__(self, model, num_blocks: int, block_size: int, capture_layer: int | None = None,
                 return_embeddings: bool = False) -> None:
        from engine.models import kv_cache_shape

        from engine.attention.torch_backend import TorchAttentionBackend

        self.model = model
        if isinstance(model.attn_backend, TorchAttentionBackend):
            # the caches below start zeroed and hold only what the model writes
            model.set_attention_backend(TorchAttentionBackend(zero_padding=False))
        self.block_size = block_size
        self.capture_layer = capture_layer
        self.return_embeddings = return_embeddings
        shape = kv_cache_shape(model.config, num_blocks, block_size)
        dtype = next(model.parameters()).dtype
        # [num_blocks, block_size, Hkv, D] per layer, k and v
        self.kv_caches = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
                          for _ in range(model.config.num_layers)]

    @staticmethod
    def input_embeds(batch) -> torch.Tensor | None:
        """[T, hidden] input rows of sequences fed embeddings (all or none of a batch)."""
        fed = [s.input_embeds is not None for s in batch.seqs]
        if not any(fed):
            return None
        if not all(fed):
            raise ValueError("a batch mixes sequences fed ids with sequences fed embeddings")
        return torch.cat([s.input_embeds.rows(s.num_cached_tokens, s.num_cached_tokens + n)
                          for s, n in zip(batch.seqs, batch.num_query_tokens)])

    def prepare(self, batch, pool) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        ids, positions, slots, starts, seq_lens = [], [], [], [0], []
        for seq, n in zip(batch.seqs, batch.num_query_tokens):
            first = seq.num_cached_tokens
            ids += seq.token_ids[first:first + n]
            positions += range(first, first + n)
            slots += [pool.slot(seq, p) for p in range(first, first + n)]
            starts.append(starts[-1] + n)
            seq_lens.append(first + n)
        width = max(len(s.block_table) for s in batch.seqs)
        tables = [s.block_table + [-1] * (width - len(s.block_table)) for s in batch.seqs]
        meta = AttentionMetadata(
            query_start_loc=torch.tensor(starts, dtype=torch.int32),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            block_tables=torch.tensor(tables, dtype=torch.int32),
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            block_size=self.block_size,
        )
        return torch.tensor(ids, dtype=torch.int64), torch.tensor(positions, dtype=torch.int64), meta

    @torch.inference_mode()
    def run(self, batch, pool) -> ForwardOutput:
        input_ids, positions, meta = self.prepare(batch, pool)
        hidden, captured = self.model(input_ids, positions, meta, self.kv_caches, capture_layer=self.capture_layer,
                                      inputs_embeds=self.input_embeds(batch))
        rows = meta.last_token_rows[torch.tensor(batch.sample_mask, dtype=torch.bool)]
        sampled_hidden = hidden[rows]
        out = ForwardOutput(self.model.compute_logits(sampled_hidden).float(), sampled_hidden)
        bounds = meta.query_start_loc.tolist()
        if captured is not None:
            out.hidden = [captured[a:b] for a, b in zip(bounds, bounds[1:])]
        if self.return_embeddings:
            embeds = self.model.embed(input_ids)
            out.embeds = [embeds[a:b] for a, b in zip(bounds, bounds[1:])]
        return out
