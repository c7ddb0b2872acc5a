"""Decoder layers with several experts, chosen per token (mixture-of-transformers).

A layer expert is one full parameter set of a decoder layer: q/k/v/o projections, q/k
norms, input and post-attention norms, MLP. A DecoderLayer (engine/models/base.py) is
expert 0 itself, under Hugging Face's names; experts 1.. are `extra_experts.{e - 1}`
with the same module names inside (BAGEL: 0 understands text and ViT tokens, 1
generates VAE latents). Attention is shared: every expert's q/k/v go into one packed
step, so tokens of all experts attend to each other under the step's one mask.

Contract: a step carries `expert_ids` int [T] (CausalLM.forward's argument), the expert
of every query row; `route_tokens` turns it, once per step, into `TokenExperts`, which
every layer reads. None (no ids, or every token on expert 0) runs today's single-expert
path unchanged; one expert for every token runs that expert's modules on the same path;
only a mixed step gathers rows per expert:

    per expert e, rows R_e:  q/k/v[R_e] = project_e(input_norm_e(x[R_e]))     # [n_e, H|Hkv, D]
    all rows:                out = attend(q, k, v)                             # [T, H * D]
    per expert e:            h = x[R_e] + o_proj_e(out[R_e]);  y[R_e] = h + mlp_e(post_norm_e(h))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from engine.model_config import ModelConfig
from engine.models.attention import SelfAttention
from engine.models.layers import GatedMLP, RMSNorm
from engine.models.moe import SparseMoE


class LayerExpert(nn.Module):
    """One expert's parameters for decoder layer `layer` (a dense or sparse MLP as the
    config says for that layer)."""

    def __init__(self, config: ModelConfig, layer: int):
        super().__init__()
        self.self_attn = SelfAttention(config)
        if config.is_moe_layer(layer):
            self.mlp = SparseMoE(config)
        else:
            self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_eps)


@dataclass
class TokenExperts:
    """Which rows of a step each expert computes; built once per step, read by every layer."""

    groups: list[tuple[int, torch.Tensor]]  # (expert, rows int64 [n_e]) per expert with tokens, ascending

    @property
    def single(self) -> int | None:
        """The expert every token picked, or None for a mixed step."""
        return self.groups[0][0] if len(self.groups) == 1 else None


def route_tokens(expert_ids: torch.Tensor | None, num_experts: int, num_tokens: int) -> TokenExperts | None:
    """expert_ids int [T] -> TokenExperts, or None where every token uses expert 0 (the
    single-expert path). Reads the ids on the host once per step."""
    if expert_ids is None:
        return None
    if expert_ids.shape != (num_tokens,):
        raise ValueError(f"expert_ids has shape {tuple(expert_ids.shape)}, the step {num_tokens} tokens")
    ids = expert_ids.long()
    host = ids.cpu()
    if host.numel() and (int(host.min()) < 0 or int(host.max()) >= num_experts):
        raise ValueError(f"expert_ids must lie in 0..{num_experts - 1}, got {int(host.min())}..{int(host.max())}")
    counts = torch.bincount(host, minlength=num_experts).tolist()
    if counts[0] == num_tokens:
        return None
    return TokenExperts([(e, (ids == e).nonzero().flatten()) for e, n in enumerate(counts) if n])


def experts_forward(layer: Any, x: torch.Tensor, cos_sin, backend: Any, plan: Any, kv_cache,
                    experts: TokenExperts) -> torch.Tensor:
    """A DecoderLayer's forward with per-token experts: x [T, hidden] -> [T, hidden]."""
    single = experts.single
    if single is not None:  # one expert for the whole step: its modules on the plain path
        expert = layer.expert(single)
        x = x + expert.self_attn(expert.input_layernorm(x), cos_sin, backend, plan, kv_cache)
        return x + expert.mlp(expert.post_attention_layernorm(x))
    attn = layer.self_attn
    num_tokens = x.shape[0]
    q = x.new_empty(num_tokens, attn.num_heads, attn.head_dim)  # [T, H, D]
    k = x.new_empty(num_tokens, attn.num_kv_heads, attn.head_dim)  # [T, Hkv, D]
    v = torch.empty_like(k)
    for e, rows in experts.groups:
        expert = layer.expert(e)
        q[rows], k[rows], v[rows] = expert.self_attn.project(expert.input_layernorm(x[rows]))
    out = attn.attend(q, k, v, cos_sin, backend, plan, kv_cache)  # [T, H * D]: one attention over all rows
    y = torch.empty_like(x)
    for e, rows in experts.groups:
        expert = layer.expert(e)
        h = x[rows] + expert.self_attn.o_proj(out[rows])  # [n_e, hidden]
        y[rows] = h + expert.mlp(expert.post_attention_layernorm(h))
    return y
