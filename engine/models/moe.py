"""Sparse mixture-of-experts MLP (Qwen3-MoE; a Qwen2-MoE style shared expert if configured).

Router: softmax over experts in fp32, top-k, optionally renormalized (`norm_topk_prob`).
Experts are stacked: gate_up_proj [E, 2I, hidden] (gate rows then up rows) and down_proj
[E, hidden, I], the layout transformers uses in memory; the loader fills them from the
per-expert tensors of Hugging Face checkpoints.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.model_config import ModelConfig
from engine.models.layers import GatedMLP


class Router(nn.Module):
    def __init__(self, hidden_size: int, num_experts: int, top_k: int, norm_topk_prob: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_experts, hidden_size))
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, hidden] -> (weights [T, k] in x.dtype, expert ids [T, k])."""
        logits = F.linear(x, self.weight)  # [T, E]
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top_probs, top_ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            top_probs = top_probs / top_probs.sum(dim=-1, keepdim=True)
        return top_probs.to(x.dtype), top_ids


class Experts(nn.Module):
    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.num_experts = num_experts
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, expert_ids: torch.Tensor) -> torch.Tensor:
        """x [T, hidden], weights/expert_ids [T, k] -> [T, hidden]."""
        out = torch.zeros_like(x)
        flat_ids = expert_ids.flatten()  # [T*k]
        order = torch.argsort(flat_ids, stable=True)
        counts = torch.bincount(flat_ids, minlength=self.num_experts).tolist()
        token_of = order // expert_ids.shape[1]  # [T*k] token of each sorted assignment
        weight_of = weights.flatten()[order]  # [T*k]
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            tokens = token_of[start:start + count]
            gate, up = F.linear(x[tokens], self.gate_up_proj[expert]).chunk(2, dim=-1)  # [n, I] each
            y = F.linear(F.silu(gate) * up, self.down_proj[expert])  # [n, hidden]
            out.index_add_(0, tokens, y * weight_of[start:start + count, None])
            start += count
        return out


class SparseMoE(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate = Router(config.hidden_size, config.num_experts, config.num_experts_per_tok,
                           config.norm_topk_prob)
        self.experts = Experts(config.num_experts, config.hidden_size, config.moe_intermediate_size)
        if config.shared_expert_intermediate_size:
            self.shared_expert = GatedMLP(config.hidden_size, config.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)
        else:
            self.shared_expert = self.shared_expert_gate = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        weights, expert_ids = self.gate(x)
        out = self.experts(x, weights, expert_ids)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out
