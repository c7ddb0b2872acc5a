"""The tiny checkpoints the model tests build, and random prompts."""
from __future__ import annotations

import torch

from engine.checkpoints.tiny_text import LLAMA3_ROPE
from engine.models.qwen3_omni import THINKER_PART
from engine.models.qwen3_omni.tiny_thinker import thinker_model

# case name -> (family for engine.checkpoints.tiny_text.make_tiny, config overrides)
PARITY_CASES = {
    "qwen3": ("qwen3", {}),
    "qwen3_moe": ("qwen3_moe", {}),
    "qwen3_moe_sparse_step": ("qwen3_moe", {"decoder_sparse_step": 2, "mlp_only_layers": [3],
                                            "num_hidden_layers": 4, "norm_topk_prob": False}),
    "llama": ("llama", {}),
    "llama3_rope": ("llama", {"rope_parameters": LLAMA3_ROPE, "tie_word_embeddings": True}),
    "qwen3_omni_moe": ("qwen3_omni_moe", {}),
}


# composite checkpoints: how make_tiny builds them, and the part whose text model is loaded
TINY_MODELS = {"qwen3_omni_moe": thinker_model}
TEXT_PARTS = {"qwen3_omni_moe": THINKER_PART}


def random_prompt(length: int, seed: int = 1, vocab: int = 256) -> list[int]:
    return torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()
