"""Self-attention of a decoder layer over the paged KV cache.

Projections, optional per-head q/k RMSNorm (Qwen3), rope, then the attention backend
(torch or FlashInfer) stores this step's K/V and attends.

The pieces are separate methods for layers with several experts
(engine/models/experts.py): each token group runs its own expert's `project` and
`o_proj`, while `attend` (rope and the backend) runs once over the whole packed step.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from engine.model_config import ModelConfig
from engine.models.layers import RMSNorm
from engine.models.rope import rotate


class SelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.scale = config.head_dim ** -0.5
        hidden, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_eps)
        else:
            self.q_norm = self.k_norm = None

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [T, hidden] -> q [T, H, D], k [T, Hkv, D], v [T, Hkv, D]: projected and q/k-normed, before rope."""
        num_tokens = x.shape[0]
        q = self.q_proj(x).view(num_tokens, self.num_heads, self.head_dim)  # [T, H, D]
        k = self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        v = self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor],
               backend: Any, plan: Any, kv_cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Rope, then the backend stores K/V and attends: -> [T, H * D], before o_proj."""
        cos, signed_sin = cos_sin  # RotaryEmbedding.rotation of this step's positions
        q, k = rotate(q, cos, signed_sin), rotate(k, cos, signed_sin)
        k_cache, v_cache = kv_cache
        out = backend.forward(plan, q, k, v, k_cache, v_cache, self.scale)  # [T, H, D]
        return out.reshape(q.shape[0], self.num_heads * self.head_dim)

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], backend: Any, plan: Any,
                kv_cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]; writes this step's K/V into kv_cache."""
        return self.o_proj(self.attend(*self.project(x), cos_sin, backend, plan, kv_cache))
