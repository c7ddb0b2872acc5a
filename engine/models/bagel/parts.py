"""BAGEL's parts in one process: the backbone, the tokenizer and the resize rules, and
(when asked) the ViT and the FLUX VAE, loaded from a checkpoint in the upstream layout."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from core.errors import InvalidArgument
from engine.models.bagel import AE_WEIGHTS, BOS_TOKEN, END_OF_IMAGE, EOS_TOKEN, START_OF_IMAGE
from engine.models.bagel.preprocess import VAE_RESIZE, VIT_RESIZE, ResizeRule
from engine.models.bagel.prompts import answer_text


@dataclass
class BagelParts:
    backbone: Any          # engine.models.bagel.backbone.BagelLM
    vit: Any               # engine.models.bagel.vit.BagelVit, or None (not loaded here)
    vae: Any               # engine.models.sd3.vae.Sd3Vae over the FLUX autoencoder, or None
    tokenizer: Any         # transformers' Qwen2 tokenizer with BAGEL's special tokens
    vae_rule: ResizeRule = VAE_RESIZE
    vit_rule: ResizeRule = VIT_RESIZE

    def __post_init__(self) -> None:
        ids = self.tokenizer.convert_tokens_to_ids([BOS_TOKEN, EOS_TOKEN, START_OF_IMAGE, END_OF_IMAGE])
        if any(i is None or i == self.tokenizer.unk_token_id for i in ids):
            raise InvalidArgument(f"BAGEL tokenizer lacks one of {BOS_TOKEN}, {EOS_TOKEN}, {START_OF_IMAGE}, "
                                  f"{END_OF_IMAGE}")
        self.bos_id, self.eos_id, start, end = ids
        self.markers = (start, end)

    @property
    def defaults(self):
        return self.backbone.bagel.defaults

    def framed(self, text: str) -> list[int]:
        """A text input's ids: im_start + its tokens + im_end (no chat template)."""
        return [self.bos_id, *self.tokenizer.encode(text), self.eos_id]

    def text_of(self, ids: list[int]) -> str:
        """The answer text of decoded ids (read as upstream reads them)."""
        return answer_text(self.tokenizer.decode([self.bos_id, *ids]))

    @classmethod
    def load(cls, checkpoint: str | Path, dtype: str | None = None, device: str = "cpu",
             overrides: Mapping[str, Any] | None = None, vae_rule: ResizeRule | None = None,
             vit_rule: ResizeRule | None = None, vit: bool = True, vae: bool = True) -> "BagelParts":
        """vae_rule / vit_rule: default the checkpoint's (BagelDefaults' image sizes)."""
        from transformers import AutoTokenizer

        from engine.models.bagel.flux_vae import load_flux_vae
        from engine.models.bagel.loader import load_backbone
        from engine.models.bagel.vit_loader import load_vit

        path = Path(checkpoint)
        backbone = load_backbone(path, dtype, device, overrides)
        tower = load_vit(path, dtype, device, overrides) if vit else None
        autoencoder = load_flux_vae(path / AE_WEIGHTS, dtype or "float32", device) if vae else None
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        rules = backbone.bagel.defaults.resize_rules(tower.config.patch_size if tower is not None else 14)
        return cls(backbone, tower, autoencoder, tokenizer, vae_rule or rules[0], vit_rule or rules[1])
