"""BAGEL's backbone: a Qwen2 mixture-of-transformers decoder on the paged-KV engine.

Every layer holds two full parameter sets (engine/models/experts.py): expert 0
(understanding: text and ViT tokens) under Hugging Face's names, expert 1 (generation:
VAE latent tokens) as `extra_experts.0`; each has q/k/v projections with bias, o_proj
without (Qwen2), per-head q/k RMSNorm, input / post-attention norms and an MLP.
Attention is one over the packed step. The final norm is per expert too (`model.norm`,
`model.norm_moe_gen`), then lm_head for text. `latent_io` holds the generation side's
modules (vae2llm, llm2vae, time_embedder, latent_pos_embed).

forward() (CausalLM's) takes the engine's step (engine/attention/metadata.py: segments for an
image's bidirectional tokens, write_kv=False for a denoising step's queries that read a
context without writing it) plus `expert_ids` int [T] per query row. A text-only step
(no expert_ids) is the understanding expert alone: exactly a Qwen2/Qwen3 causal LM.

Checkpoint names (ema.safetensors): every decoder parameter under `language_model.`,
expert 1's under its upstream names: `<module>_moe_gen` for the layer's modules
(`self_attn.q_proj_moe_gen`, `mlp_moe_gen`, `input_layernorm_moe_gen`, ...), the
generation side's under their own names (`vae2llm.weight`, `time_embedder.mlp.0.bias`).
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch import nn

from engine.model_config import ModelConfig
from engine.models.bagel.config import BagelConfig
from engine.models.bagel.latent_io import LatentIO
from engine.models.base import CausalLM, WeightSource
from engine.models.experts import TokenExperts
from engine.models.layers import RMSNorm

LLM_PREFIX = "language_model."
EXPERT_PREFIX = ".extra_experts.0."
LATENT_PREFIX = "latent_io."
GEN_SUFFIX = "_moe_gen"


def checkpoint_name(param_name: str) -> str:
    """The ema.safetensors key of a BagelLM parameter name."""
    if param_name.startswith(LATENT_PREFIX):
        return param_name[len(LATENT_PREFIX):]
    if EXPERT_PREFIX not in param_name:
        return LLM_PREFIX + param_name
    # model.layers.3.extra_experts.0.self_attn.q_proj.weight -> model.layers.3.self_attn.q_proj_moe_gen.weight
    layer, rest = param_name.split(EXPERT_PREFIX)
    parts = rest.split(".")
    module = 1 if parts[0] == "self_attn" else 0  # the module that carries the suffix
    parts[module] += GEN_SUFFIX
    return LLM_PREFIX + layer + "." + ".".join(parts)


def _drop_o_proj_bias(model: nn.Module, config: ModelConfig) -> None:
    """Qwen2's o_proj has no bias (q/k/v have): every expert's o_proj without one."""
    width = config.num_heads * config.head_dim
    for layer in model.model.layers:
        for e in range(model.num_layer_experts):
            layer.expert(e).self_attn.o_proj = nn.Linear(width, config.hidden_size, bias=False)


class BagelLM(CausalLM):
    num_layer_experts = 2

    def __init__(self, config: BagelConfig):
        super().__init__(config.llm)
        self.bagel = config
        _drop_o_proj_bias(self, config.llm)
        self.model.norm_moe_gen = RMSNorm(config.llm.hidden_size, config.llm.rms_eps)
        self.latent_io = LatentIO(config.llm.hidden_size, config.defaults)

    def final_norm(self, x: torch.Tensor, experts: TokenExperts | None) -> torch.Tensor:
        """x [T, hidden]: each row through its own expert's final norm."""
        if experts is None:
            return self.model.norm(x)
        norms = (self.model.norm, self.model.norm_moe_gen)
        if experts.single is not None:
            return norms[experts.single](x)
        y = torch.empty_like(x)
        for e, rows in experts.groups:
            y[rows] = norms[e](x[rows])
        return y

    def weight_sources(self, has_tensor) -> Iterator[WeightSource]:
        for name, _ in self.named_parameters():
            yield name, checkpoint_name(name), None
