"""Runs one scheduled batch through the model over the paged KV cache.

Owns the KV tensors (one k/v pair per layer, [num_blocks, block_size, Hkv, D]) and
turns a ScheduledBatch into the flat inputs + AttentionMetadata of one forward.

A batch's optional features (engine/batch.py) become the metadata's segment_ids
(int32 [T]) and write_kv (bool [S]), and the forward's expert_ids (int64 [T]); rows
that do not store get slot -1. They run on the CPU path only for now: the CUDA step
path (engine/cuda_runner.py, CUDA graphs) does not carry them, so it refuses them.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

from engine.attention.metadata import AttentionMetadata
from engine.prompt_media import step_media


@dataclass
class ForwardOutput:
    logits: torch.Tensor            # [num_sampled, vocab] fp32: rows of sequences that sample this step
    sampled_hidden: torch.Tensor | None = None  # [num_sampled, hidden] final normed hidden of those rows
    hidden: list | None = None      # per sequence: [q_i, hidden] captured layer states of its query tokens
    embeds: list | None = None      # per sequence: [q_i, hidden] input embeddings of its query tokens


class ModelRunner:
    def __init__(self, model, num_blocks: int, block_size: int, capture_layer: int | None = None,
                 return_embeddings: bool = False, device: str | torch.device = "cpu",
                 cuda_graph_sizes: tuple[int, ...] = ()) -> None:
        from engine.models import kv_cache_shape

        from engine.attention.torch_backend import TorchAttentionBackend

        self.model = model
        if isinstance(model.attn_backend, TorchAttentionBackend):
            # the caches below start zeroed and hold only what the model writes
            model.set_attention_backend(TorchAttentionBackend(zero_padding=False, reuse_buffers=True,
                                                           use_kernel=model.attn_backend.use_kernel))
        self.block_size = block_size
        self.capture_layer = capture_layer
        self.return_embeddings = return_embeddings
        self.device = torch.device(device)
        # CUDA: one scratch block past the pool's, written by CUDA-graph padding rows (engine/cuda_graphs.py)
        extra = 0 if self.device.type == "cpu" else 1
        shape = kv_cache_shape(model.config, num_blocks + extra, block_size)
        dtype = next(model.parameters()).dtype
        # [num_blocks, block_size, Hkv, D] per layer, k and v
        self.kv_caches = [(torch.zeros(shape, dtype=dtype, device=self.device),
                           torch.zeros(shape, dtype=dtype, device=self.device))
                          for _ in range(model.config.num_layers)]
        self.cuda = None  # the CUDA step path (engine/cuda_runner.py); None on CPU
        if self.device.type == "cuda":
            from engine.cuda_runner import CudaRunner

            self.cuda = CudaRunner(self, list(cuda_graph_sizes))

    @torch.inference_mode()
    def copy_block(self, src: int, dst: int) -> None:
        """K/V of block src into block dst, every layer (the pool's copy-on-write)."""
        for k, v in self.kv_caches:
            k[dst].copy_(k[src])
            v[dst].copy_(v[src])

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
        """Flat ids/positions [T] and the step's metadata, built with numpy (no per-token Python)."""
        seqs, counts = batch.seqs, batch.num_query_tokens
        firsts = np.fromiter((s.num_cached_tokens for s in seqs), dtype=np.int64, count=len(seqs))  # [S]
        n = np.asarray(counts, dtype=np.int64)  # [S]
        ids = list(chain.from_iterable(s.token_ids[f:f + c] for s, f, c in zip(seqs, firsts.tolist(), counts)))
        starts = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(n, out=starts[1:])
        seq_of_row = np.repeat(np.arange(len(seqs)), n)  # [T]
        positions = np.arange(starts[-1]) - starts[seq_of_row] + firsts[seq_of_row]  # [T]
        tables = self._block_tables(seqs)  # [S, width], -1 padded
        writes = None if batch.write_kv is None else np.repeat(np.asarray(batch.write_kv, dtype=bool), n)  # [T]
        slots = self._slots(seqs, tables, seq_of_row, positions, writes)
        meta = AttentionMetadata(
            query_start_loc=torch.from_numpy(starts.astype(np.int32)),
            seq_lens=torch.from_numpy((firsts + n).astype(np.int32)),
            block_tables=torch.from_numpy(tables),
            slot_mapping=torch.from_numpy(slots),
            block_size=self.block_size,
            **(self._attention_features(batch) if batch.has_features else {}),
        )
        return torch.tensor(ids, dtype=torch.int64), torch.from_numpy(positions), meta

    @staticmethod
    def _attention_features(batch) -> dict:
        """The batch's segment_ids (int32 [T]) and write_kv (bool [S]) as metadata fields."""
        out = {}
        if batch.segment_ids is not None:
            out["segment_ids"] = torch.from_numpy(np.concatenate(
                [np.asarray(s, dtype=np.int32).reshape(-1) for s in batch.segment_ids]))
        if batch.write_kv is not None:
            out["write_kv"] = torch.tensor(batch.write_kv, dtype=torch.bool)
        return out

    def _slots(self, seqs, tables: np.ndarray, seq_of_row: np.ndarray, positions: np.ndarray,
               writes: np.ndarray | None) -> np.ndarray:
        """int64 [T] KV slot of each query row; -1 where writes [T] says the row is not stored."""
        if writes is not None:  # rows that do not store need no allocated block
            slots = np.full(positions.shape, -1, dtype=np.int64)
            if writes.any():
                slots[writes] = self._slots(seqs, tables, seq_of_row[writes], positions[writes], None)
            return slots
        block_of_row = positions // self.block_size
        if (block_of_row >= np.asarray([len(s.block_table) for s in seqs])[seq_of_row]).any():
            raise IndexError("a query token lies past its sequence's allocated blocks")
        return tables[seq_of_row, block_of_row].astype(np.int64) * self.block_size + positions % self.block_size

    @staticmethod
    def expert_ids(batch) -> torch.Tensor | None:
        """int64 [T] layer expert of each query row, or None (expert 0 everywhere)."""
        if batch.expert_ids is None:
            return None
        per_seq = [np.asarray(e, dtype=np.int64).reshape(-1) for e in batch.expert_ids]
        return torch.from_numpy(np.concatenate(per_seq))

    @staticmethod
    def _block_tables(seqs) -> np.ndarray:
        """int32 [S, longest block table], -1 padded."""
        tables = np.full((len(seqs), max(len(s.block_table) for s in seqs)), -1, dtype=np.int32)
        for i, s in enumerate(seqs):
            tables[i, :len(s.block_table)] = s.block_table
        return tables

    @torch.inference_mode()
    def run(self, batch, pool) -> ForwardOutput:
        input_ids, positions, meta = self.prepare(batch, pool)
        media = step_media(batch.seqs, np.asarray(batch.start_positions), batch.num_query_tokens, positions.numpy())
        if self.cuda is not None:
            if batch.has_features:
                raise NotImplementedError("expert_ids / segment_ids / write_kv steps on the CUDA step path")
            return self.cuda.run(batch, pool, input_ids, positions, meta, media)
        inputs_embeds, additions = self.input_embeds(batch), None
        if media is not None:  # audio/image rows spliced in, 3-axis rope ids, deepstack additions
            positions, additions = media.positions, media.additions
            inputs_embeds = media.splice(self.model.embed(input_ids) if inputs_embeds is None else inputs_embeds)
        # passed only when set: a model without per-token experts need not take the argument
        experts = {} if batch.expert_ids is None else {"expert_ids": self.expert_ids(batch)}
        hidden, captured = self.model(input_ids, positions, meta, self.kv_caches, capture_layer=self.capture_layer,
                                      inputs_embeds=inputs_embeds, layer_additions=additions, **experts)
        sample_mask = batch.sample_mask
        rows = meta.last_token_rows if all(sample_mask) else meta.last_token_rows[torch.tensor(sample_mask)]
        sampled_hidden = hidden if rows.numel() == hidden.shape[0] else hidden[rows]
        out = ForwardOutput(self.model.compute_logits(sampled_hidden).float(), sampled_hidden)
        bounds = meta.query_start_loc.tolist()
        if captured is not None:
            out.hidden = [captured[a:b] for a, b in zip(bounds, bounds[1:])]
        if self.return_embeddings:
            embeds = self.model.embed(input_ids)  # placeholder rows at media positions: the talker reads its hidden there
            out.embeds = [embeds[a:b] for a, b in zip(bounds, bounds[1:])]
        return out
