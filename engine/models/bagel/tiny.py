"""A tiny random BAGEL checkpoint in the upstream BAGEL-7B-MoT directory layout.

`starmesh make-tiny bagel DIR` writes llm_config.json (a Qwen2 config), vit_config.json
(a SiglipVisionConfig-style dict), ema.safetensors (the backbone's tensors under their
upstream keys, plus the vision side's from engine.models.bagel.vit.tiny_vit_state),
ae.safetensors (a FLUX-layout autoencoder from engine.models.bagel.flux_vae.tiny_ae_state)
and Qwen2 tokenizer files with BAGEL's special tokens, built offline: byte-level BPE
without merges (ids 0..255 are the bytes), then the special tokens at 256.. in
SPECIAL_TOKENS' order.

Every parameter is random, norms' affine weights (around 1) and the position tables
included; the loader defaults (BagelDefaults) are upstream's, so no bagel_defaults.json
is written. Weights are fp32.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.models.bagel import AE_WEIGHTS, EMA_WEIGHTS, EOS_TOKEN, LLM_CONFIG, SPECIAL_TOKENS, VIT_CONFIG

NUM_BYTES = 256
TOKEN_IDS = {token: NUM_BYTES + i for i, token in enumerate(SPECIAL_TOKENS)}


@dataclass(frozen=True)
class TinyBagelSpec:
    hidden_size: int = 64
    intermediate_size: int = 96
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    vocab_size: int = 272          # the tokenizer's 261 ids, padded (the release pads too)
    vit_hidden_size: int = 32
    vit_intermediate_size: int = 64
    vit_layers: int = 3            # 2 run: the last is dropped, as upstream serves it
    vit_heads: int = 2

    def __post_init__(self) -> None:
        if self.vocab_size < NUM_BYTES + len(SPECIAL_TOKENS):
            raise ValueError(f"TinyBagelSpec.vocab_size must be >= {NUM_BYTES + len(SPECIAL_TOKENS)}")


def llm_config(spec: TinyBagelSpec) -> dict:
    """A Qwen2 config.json dict as the release's llm_config.json spells it."""
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": spec.vocab_size,
            "hidden_size": spec.hidden_size, "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_hidden_layers, "num_attention_heads": spec.num_attention_heads,
            "num_key_value_heads": spec.num_key_value_heads, "hidden_act": "silu",
            "max_position_embeddings": 4096, "rms_norm_eps": spec.rms_norm_eps, "rope_theta": spec.rope_theta,
            "attention_dropout": 0.0, "bos_token_id": TOKEN_IDS["<|endoftext|>"],
            "eos_token_id": TOKEN_IDS[EOS_TOKEN], "tie_word_embeddings": False, "use_sliding_window": False,
            "sliding_window": 4096, "max_window_layers": spec.num_hidden_layers, "torch_dtype": "float32",
            "use_cache": True}


def vit_config(spec: TinyBagelSpec) -> dict:
    """SigLIP's so400m layout at tiny widths: 14-pixel patches on a 70 x 70 table (980 px)."""
    return {"model_type": "siglip_vision_model", "hidden_size": spec.vit_hidden_size,
            "intermediate_size": spec.vit_intermediate_size, "num_hidden_layers": spec.vit_layers,
            "num_attention_heads": spec.vit_heads, "num_channels": 3, "image_size": 980, "patch_size": 14,
            "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "attention_dropout": 0.0}


@torch.no_grad()
def random_backbone_state(config, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random fp32 tensors for every backbone parameter under its ema key: matrices scaled
    by fan_in ** -0.5, norm weights 1 +- 0.2, biases, embeddings and tables small."""
    from engine.models.bagel.loader import build_backbone
    from engine.models.bagel.backbone import checkpoint_name

    model = build_backbone(config, "meta")
    state = {}
    for name, param in model.named_parameters():
        noise = torch.randn(param.shape, generator=generator)
        if "norm" in name and name.endswith(".weight"):
            value = 1 + 0.2 * noise
        elif param.dim() == 2 and "embed" not in name:
            value = noise * param.shape[1] ** -0.5
        else:
            value = 0.3 * noise
        state[checkpoint_name(name)] = value.contiguous()
    return state


def write_tokenizer(directory: Path) -> None:
    """transformers' Qwen2Tokenizer over the 256 bytes plus BAGEL's special tokens (ids 256..),
    saved with save_pretrained, and the vocab.json / merges.txt pair slow loaders read."""
    from transformers import Qwen2Tokenizer

    from engine.checkpoints.tiny_text import _byte_to_unicode

    chars = _byte_to_unicode()
    vocab = {chars[b]: b for b in range(NUM_BYTES)}
    vocab.update(TOKEN_IDS)  # in the vocabulary already, so marking them special keeps their ids
    tokenizer = Qwen2Tokenizer(vocab=dict(vocab), merges=[], eos_token=EOS_TOKEN, pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": [t for t in SPECIAL_TOKENS if t != "<|endoftext|>"]})
    ids = tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    if ids != list(TOKEN_IDS.values()):
        raise RuntimeError(f"tiny BAGEL tokenizer: special tokens got ids {ids}, expected {list(TOKEN_IDS.values())}")
    tokenizer.save_pretrained(str(directory))
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (directory / "merges.txt").write_text("#version: 0.2\n")


def make_tiny_bagel(directory: str | Path, *, seed: int = 0, spec: TinyBagelSpec = TinyBagelSpec()) -> Path:
    """`starmesh make-tiny bagel DIR`: the whole checkpoint, fp32, from `seed`."""
    from safetensors.torch import save_file

    from engine.models.bagel.config import BagelConfig, BagelDefaults, llm_model_config
    from engine.models.bagel.flux_vae import tiny_ae_state
    from engine.models.bagel.vit import tiny_vit_state

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    llm, vit = llm_config(spec), vit_config(spec)
    defaults = BagelDefaults()
    config = BagelConfig(llm=llm_model_config(llm, defaults), vit=vit, defaults=defaults)
    generator = torch.Generator().manual_seed(seed)
    ema = random_backbone_state(config, generator)
    ema.update(tiny_vit_state(vit, spec.hidden_size, generator, **defaults.vit_options()))
    ae_state, _ = tiny_ae_state(generator)
    save_file(ema, str(directory / EMA_WEIGHTS))
    save_file({k: v.contiguous() for k, v in ae_state.items()}, str(directory / AE_WEIGHTS))
    (directory / LLM_CONFIG).write_text(json.dumps(llm, indent=2))
    (directory / VIT_CONFIG).write_text(json.dumps(vit, indent=2))
    write_tokenizer(directory)
    return directory
