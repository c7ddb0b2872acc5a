"""BAGEL's ViT as a tower of the shared encoder service (its "encoder" hook).

An image part's file bytes are decoded (INVALID_ARGUMENT naming the part when they are
not an image), resized by the VAE rule as every BAGEL image is, then by the ViT rule, cut
into patches; one forward runs every queued image (attention stays within each). Each
part's rows are the connector's output plus vit_pos_embed [n, llm hidden], its grid
(1, rows, cols) of patches.
"""
from __future__ import annotations

import io

import torch

from core.errors import InvalidArgument
from engine.models.bagel.preprocess import vae_resize, vit_image
from services.bagel.checkpoint import is_bagel_checkpoint
from services.encoder.media_list import EncodedPart
from services.encoder.towers import EncoderHook


class BagelVitTower:
    kinds = ("image",)

    def __init__(self, vit, vae_rule, vit_rule) -> None:
        self.vit, self.vae_rule, self.vit_rule = vit, vae_rule, vit_rule

    @classmethod
    def load(cls, checkpoint: str, dtype: str, device: str) -> "BagelVitTower":
        from engine.models.bagel.config import read_bagel_config
        from engine.models.bagel.vit_loader import load_vit

        vit = load_vit(checkpoint, dtype, device)
        rules = read_bagel_config(checkpoint).defaults.resize_rules(vit.config.patch_size)
        return cls(vit, *rules)

    def prepare(self, kind: str, data: bytes, field: str):
        from PIL import Image, UnidentifiedImageError

        try:
            image = Image.open(io.BytesIO(data))
            image.load()
        except (UnidentifiedImageError, OSError, ValueError) as e:
            raise InvalidArgument(f"{field}: not a decodable image ({e})") from None
        cfg = self.vit.config
        return vit_image(vae_resize(image, self.vae_rule), cfg.patch_size, cfg.max_num_patch_per_side,
                         self.vit_rule, field)

    @torch.inference_mode()
    def run(self, payloads: list) -> list[EncodedPart]:
        pixels = torch.cat([p.pixels for p in payloads])
        ids = torch.cat([p.position_ids for p in payloads])
        lens = [len(p.pixels) for p in payloads]
        rows = self.vit(pixels, ids, lens).float().cpu()  # [sum n, llm hidden]
        return [EncodedPart(r.clone(), None, (1, *p.grid)) for r, p in zip(rows.split(lens), payloads)]


def encoder_hook(checkpoint: str) -> EncoderHook | None:
    """BAGEL's vision tower when `checkpoint` is a BAGEL checkpoint, else None."""
    if not is_bagel_checkpoint(checkpoint):
        return None
    return EncoderHook({"vision": lambda dtype, device: BagelVitTower.load(checkpoint, dtype, device)})
