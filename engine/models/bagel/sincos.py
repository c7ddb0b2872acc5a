"""BAGEL's fixed 2D sin-cos position tables (`vit_pos_embed`, `latent_pos_embed`).

A table covers a `side` x `side` grid, one row per cell in row-major order (cell (r, c) is
row r * side + c). Each row is [sin(c * w), cos(c * w), sin(r * w), cos(r * w)] with
w_k = 10000 ** (-k / (dim / 4)), k < dim / 4: the column half first, the row half second,
computed in float64 and stored in float32. The checkpoint stores the table as the
parameter `pos_embed`, so loading replaces the values computed here.
"""
from __future__ import annotations

import torch
from torch import nn


def sincos_table(side: int, dim: int) -> torch.Tensor:
    """[side * side, dim] float32; dim must be a multiple of 4 (two halves of sin | cos)."""
    if dim % 4 or side < 1:
        raise ValueError(f"sincos_table: dim must be a multiple of 4 and side >= 1, got side={side} dim={dim}")
    quarter = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float64) / quarter)  # [dim / 4]
    coords = torch.arange(side, dtype=torch.float64)
    rows = coords.repeat_interleave(side)   # [side * side]: r of cell r * side + c
    cols = coords.repeat(side)              # [side * side]: c
    halves = []
    for pos in (cols, rows):
        angles = pos[:, None] * omega[None, :]  # [side * side, dim / 4]
        halves += [angles.sin(), angles.cos()]
    return torch.cat(halves, dim=1).float()


class PositionTable(nn.Module):
    """`pos_embed` [side * side, dim] indexed by flattened grid ids."""

    def __init__(self, side: int, dim: int):
        super().__init__()
        self.side = side
        self.pos_embed = nn.Parameter(torch.empty(side * side, dim), requires_grad=False)
        if not self.pos_embed.is_meta:  # a model built on the meta device gets the table from its checkpoint
            self.pos_embed.data.copy_(sincos_table(side, dim))

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:  # [N] -> [N, dim]
        return self.pos_embed[position_ids]
