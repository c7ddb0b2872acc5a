"""Llama: no q/k norm; optional attention/MLP biases; rope scaling none or "llama3"."""
from __future__ import annotations

from engine.model_config import ModelConfig
from engine.models.base import CausalLM
from core.errors import InvalidArgument


class LlamaForCausalLM(CausalLM):
    def __init__(self, config: ModelConfig):
        if config.family != "llama" or config.qk_norm or config.num_experts:
            raise InvalidArgument(f"LlamaForCausalLM needs a dense llama config without qk_norm, got {config.family}")
        super().__init__(config)
