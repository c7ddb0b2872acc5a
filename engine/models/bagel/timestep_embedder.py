"""The flow-time embedding added to every latent token (DiT's timestep embedder).

t [N] (flow time in [0, 1], fractional) -> a sinusoid of 256 frequencies, cos half
first, then sin, frequencies exp(-ln(10000) * i / 128) in fp32 -> Linear -> SiLU ->
Linear, to the LLM width. Checkpoint names: `mlp.0.*`, `mlp.2.*`.
"""
from __future__ import annotations

import math

import torch
from torch import nn

FREQUENCY_DIM = 256
MAX_PERIOD = 10000.0


def timestep_frequencies(t: torch.Tensor, dim: int = FREQUENCY_DIM) -> torch.Tensor:
    """t [N] -> [N, dim] fp32: cat(cos(t * f), sin(t * f)) over dim // 2 frequencies."""
    half = dim // 2
    freqs = torch.exp(-math.log(MAX_PERIOD) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]  # [N, half]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size: int, frequency_dim: int = FREQUENCY_DIM):
        super().__init__()
        self.frequency_dim = frequency_dim
        self.mlp = nn.Sequential(nn.Linear(frequency_dim, hidden_size), nn.SiLU(), nn.Linear(hidden_size, hidden_size))

    def forward(self, t: torch.Tensor) -> torch.Tensor:  # [N] -> [N, hidden]
        freqs = timestep_frequencies(t, self.frequency_dim)
        return self.mlp(freqs.to(self.mlp[0].weight.dtype))
