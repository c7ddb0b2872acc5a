"""A minimal paged-KV driver for model tests: block allocation, metadata, one forward.

The caches start filled with NaN, and blocks are handed out in a scrambled order, so a
model that reads a slot it never wrote, or ignores the block table, fails loudly.
"""
from __future__ import annotations

import torch

from engine.attention.metadata import AttentionMetadata
from engine.models import CausalLM, kv_cache_shape


class PagedDriver:
    def __init__(self, model: CausalLM, num_blocks: int = 64, block_size: int = 4, seed: int = 0):
        self.model = model
        self.block_size = block_size
        shape = kv_cache_shape(model.config, num_blocks, block_size)
        dtype = model.config.torch_dtype
        self.kv_caches = [(torch.full(shape, float("nan"), dtype=dtype), torch.full(shape, float("nan"), dtype=dtype))
                          for _ in range(model.config.num_layers)]
        self.free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
        self.blocks: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def _grow(self, seq: int, new_len: int) -> None:
        blocks = self.blocks.setdefault(seq, [])
        while len(blocks) * self.block_size < new_len:
            blocks.append(self.free.pop())

    def metadata(self, chunks: list[tuple[int, list[int]]]) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        """chunks: (seq id, new token ids) per sequence -> (input_ids, positions, meta)."""
        ids, positions, slots, starts, seq_lens = [], [], [], [0], []
        for seq, tokens in chunks:
            start = self.lens.get(seq, 0)
            self._grow(seq, start + len(tokens))
            for pos in range(start, start + len(tokens)):
                block = self.blocks[seq][pos // self.block_size]
                slots.append(block * self.block_size + pos % self.block_size)
                positions.append(pos)
            ids.extend(tokens)
            starts.append(starts[-1] + len(tokens))
            seq_lens.append(start + len(tokens))
            self.lens[seq] = start + len(tokens)
        width = max(len(self.blocks[seq]) for seq, _ in chunks)
        tables = torch.full((len(chunks), width + 1), -1, dtype=torch.int32)
        for i, (seq, _) in enumerate(chunks):
            tables[i, :len(self.blocks[seq])] = torch.tensor(self.blocks[seq], dtype=torch.int32)
        meta = AttentionMetadata(
            query_start_loc=torch.tensor(starts, dtype=torch.int32), seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            block_tables=tables, slot_mapping=torch.tensor(slots, dtype=torch.int64), block_size=self.block_size)
        return torch.tensor(ids, dtype=torch.int64), torch.tensor(positions, dtype=torch.int64), meta

    def step(self, chunks: list[tuple[int, list[int]]], capture_layer: int | None = None):
        """One forward; returns (logits of every query row [T, vocab] fp32, captured)."""
        input_ids, positions, meta = self.metadata(chunks)
        hidden, captured = self.model(input_ids, positions, meta, self.kv_caches, capture_layer=capture_layer)
        return self.model.compute_logits(hidden), captured

    def last_rows(self, chunks: list[tuple[int, list[int]]]) -> list[int]:
        ends, total = [], 0
        for _, tokens in chunks:
            total += len(tokens)
            ends.append(total - 1)
        return ends


def greedy(driver: PagedDriver, prompt: list[int], num_new: int, chunk_sizes: list[int] | None = None,
           seq: int = 0) -> tuple[list[int], torch.Tensor]:
    """Greedy generation over the paged cache: (new ids, logits [num_new, vocab])."""
    chunk_sizes = chunk_sizes or [len(prompt)]
    assert sum(chunk_sizes) == len(prompt)
    start = 0
    for size in chunk_sizes:
        logits, _ = driver.step([(seq, prompt[start:start + size])])
        start += size
    out_ids, out_logits = [], []
    for _ in range(num_new):
        last = logits[-1]
        out_logits.append(last)
        out_ids.append(int(last.argmax()))
        if len(out_ids) == num_new:
            break
        logits, _ = driver.step([(seq, [out_ids[-1]])])
    return out_ids, torch.stack(out_logits)
