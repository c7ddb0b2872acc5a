"""A plain block stack (no engine) for the offload tests: what a DiT looks like to DLO."""
from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width, bias=False)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, width] -> [B, width]
        return x + self.fc2(torch.tanh(self.fc1(self.norm(x))))


class Stack(nn.Module):
    """embed -> blocks -> head; widths chosen so block bytes are not multiples of anything."""

    def __init__(self, num_blocks: int = 5, width: int = 24, hidden: int = 37, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Linear(7, width)
        self.blocks = nn.ModuleList(Block(width, hidden) for _ in range(num_blocks))
        self.head = nn.Linear(width, 3)
        self.requires_grad_(False).eval()

    def forward(self, x: torch.Tensor, num_blocks: int | None = None) -> torch.Tensor:  # [B, 7] -> [B, 3]
        h = self.embed(x)
        for block in self.blocks[:num_blocks]:
            h = block(h)
        return self.head(h)


def inputs(seed: int = 1, batch: int = 4) -> torch.Tensor:
    return torch.randn(batch, 7, generator=torch.Generator().manual_seed(seed))
