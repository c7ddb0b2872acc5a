"""Qwen3-MoE (and the Qwen3-Omni thinker's text model): Qwen3 attention, sparse MoE MLPs
on the layers `decoder_sparse_step`/`mlp_only_layers` select, dense MLPs elsewhere."""
from __future__ import annotations

from engine.model_config import ModelConfig
from engine.models.base import CausalLM
from core.errors import InvalidArgument


class Qwen3MoeForCausalLM(CausalLM):
    def __init__(self, config: ModelConfig):
        if config.family != "qwen3_moe" or not config.qk_norm or config.num_experts <= 0:
            raise InvalidArgument(
                f"Qwen3MoeForCausalLM needs a qwen3_moe config with experts and qk_norm, got {config.family}")
        super().__init__(config)
