"""Model families for the paged engine: Qwen3, Qwen3-MoE (also the Qwen3-Omni thinker's
text model) and Llama, all instances of engine.models.base.CausalLM."""
from __future__ import annotations

from engine.model_config import ModelConfig
from engine.models.base import CausalLM, kv_cache_shape
from engine.models.llama import LlamaForCausalLM
from engine.models.qwen3 import Qwen3ForCausalLM
from engine.models.qwen3_moe import Qwen3MoeForCausalLM
from core.errors import InvalidArgument

MODEL_CLASSES: dict[str, type[CausalLM]] = {
    "qwen3": Qwen3ForCausalLM,
    "qwen3_moe": Qwen3MoeForCausalLM,
    "llama": LlamaForCausalLM,
}


def model_class(config: ModelConfig) -> type[CausalLM]:
    try:
        return MODEL_CLASSES[config.family]
    except KeyError:
        raise InvalidArgument(f"no model for family {config.family!r} (have {tuple(MODEL_CLASSES)})") from None


__all__ = ["CausalLM", "MODEL_CLASSES", "LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
           "kv_cache_shape", "model_class"]
