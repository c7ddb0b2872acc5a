"""What the BAGEL component loads: the backbone and the tokenizer (the ViT serves on the
encoder service, the VAE on the vae service)."""
from __future__ import annotations

from engine.models.bagel.parts import BagelParts


def backbone_parts(checkpoint: str, dtype: str | None = None, device: str = "cpu") -> BagelParts:
    return BagelParts.load(checkpoint, dtype, device, vit=False, vae=False)
