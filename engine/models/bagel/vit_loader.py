"""Load BAGEL's vision side (vit_model.*, connector.*, vit_pos_embed.* of ema.safetensors)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

from core.errors import InvalidArgument
from engine.models.bagel import EMA_WEIGHTS
from engine.models.bagel.config import read_bagel_config
from engine.models.bagel.loader import VISION_PREFIXES
from engine.models.bagel.vit import BagelVit
from engine.models.bagel.vit_config import VitConfig
from engine.models.loader import _open


def load_vit(checkpoint_dir: str | Path, dtype: str | None = None, device: str | torch.device = "cpu",
             overrides: Mapping[str, Any] | None = None) -> BagelVit:
    """The ViT tower + connector + vit_pos_embed of a BAGEL checkpoint (strict: every
    parameter from its key, every vision key used)."""
    path = Path(checkpoint_dir)
    config = read_bagel_config(path, dtype, overrides)
    vit = BagelVit(VitConfig.from_siglip(config.vit, config.llm.hidden_size, **config.defaults.vit_options()))
    weights = path / EMA_WEIGHTS
    if not weights.is_file():
        raise InvalidArgument(f"BAGEL checkpoint {str(path)!r} has no {EMA_WEIGHTS}")
    with _open(weights) as f:
        state = {k: f.get_tensor(k) for k in f.keys() if k.startswith(VISION_PREFIXES)}
    missing, unexpected = vit.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise InvalidArgument(f"{weights}: vision tensors do not match the ViT (missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]})")
    return vit.to(device=device, dtype=config.llm.torch_dtype).eval().requires_grad_(False)
