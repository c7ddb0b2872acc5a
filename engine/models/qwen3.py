"""Qwen3 dense: Llama-style decoder with per-head q/k RMSNorm and no biases."""
from __future__ import annotations

from engine.model_config import ModelConfig
from engine.models.base import CausalLM
from core.errors import InvalidArgument


class Qwen3ForCausalLM(CausalLM):
    def __init__(self, config: ModelConfig):
        if config.family != "qwen3" or not config.qk_norm or config.num_experts:
            raise InvalidArgument(f"Qwen3ForCausalLM needs a dense qwen3 config with qk_norm, got {config.family}")
        super().__init__(config)
