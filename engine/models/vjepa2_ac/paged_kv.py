"""The KV tensors of the rollout engine: one block holds one timestep's tokens.

Layout per layer: [num_blocks, tokens_per_step, heads, head_dim]; engine.kv_pool.KVPool
decides which rollout owns which block. Because the predictor is block-causal in time, a
block is written once (when its timestep is computed) and only read afterwards.
"""
from __future__ import annotations

import torch


class PagedKV:
    def __init__(self, num_layers: int, num_blocks: int, tokens_per_step: int, num_heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        shape = (num_layers, num_blocks, tokens_per_step, num_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.tokens_per_step = tokens_per_step

    def write(self, layer: int, blocks: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """blocks [B, n] (long); k, v [B, heads, n * S, head_dim]: n timesteps per row."""
        b, n = blocks.shape
        flat = blocks.reshape(-1)
        for cache, new in ((self.k[layer], k), (self.v[layer], v)):
            cache[flat] = new.transpose(1, 2).reshape(b * n, self.tokens_per_step, *new.shape[1:2], -1)

    def gather(self, layer: int, tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tables [B, nb] (long, rows padded with any valid block) -> k, v [B, heads, nb * S, head_dim]."""
        b, nb = tables.shape
        out = []
        for cache in (self.k[layer], self.v[layer]):
            rows = cache[tables]                               # [B, nb, S, heads, head_dim]
            out.append(rows.reshape(b, nb * self.tokens_per_step, *rows.shape[3:]).transpose(1, 2))
        return out[0], out[1]

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()
