"""Two tiny BAGEL checkpoints (`starmesh make-tiny bagel` at two sizes and seeds), their
in-process parts with small resize rules, and test images."""
from __future__ import annotations

import json

import numpy as np
import torch

from engine.models.bagel.preprocess import ResizeRule
from engine.models.bagel.tiny import TinyBagelSpec, make_tiny_bagel

SPECS = {
    "a": (TinyBagelSpec(), 11),
    "b": (TinyBagelSpec(hidden_size=72, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
                        num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5, vocab_size=300,
                        vit_hidden_size=48, vit_heads=3), 23),
}
# Small images keep the tests fast: VAE side up to 64 px (multiples of 16), ViT up to 56 (of 14).
VAE_RULE, VIT_RULE = ResizeRule(64, 32, 16), ResizeRule(56, 28, 14)


SMALL_IMAGES = {"vae_image_max": 64, "vae_image_min": 32, "vit_image_max": 56, "vit_image_min": 28}


def build(directory, case: str):
    """The tiny checkpoint with a bagel_defaults.json of small image sizes (VAE_RULE, VIT_RULE)."""
    spec, seed = SPECS[case]
    path = make_tiny_bagel(directory, seed=seed, spec=spec)
    (path / "bagel_defaults.json").write_text(json.dumps(SMALL_IMAGES))
    return path


def load_parts(directory):
    from engine.models.bagel.parts import BagelParts

    parts = BagelParts.load(directory)
    assert (parts.vae_rule, parts.vit_rule) == (VAE_RULE, VIT_RULE)
    return parts


def reference_of(directory, parts):
    from safetensors.torch import load_file

    from tests.pipelines.bagel_reference import Reference

    state = load_file(str(directory / "ema.safetensors"))
    llm = json.loads((directory / "llm_config.json").read_text())
    return Reference(state, llm, parts.tokenizer, parts.vit, parts.vae.vae, VAE_RULE, VIT_RULE)


def image(width: int, height: int, seed: int):
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def noise(height: int, width: int, seed: int) -> torch.Tensor:
    return torch.randn(16, height // 8, width // 8, generator=torch.Generator().manual_seed(seed))
