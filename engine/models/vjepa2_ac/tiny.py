"""A tiny random V-JEPA 2-AC checkpoint (engine.models.vjepa2_ac.checkpoint layout), built offline.

`encoder/` is a transformers VJEPA2Model (random, fixed seed) saved with save_pretrained,
so transformers itself loads it as the reference; `predictor/` is an ACPredictor with
random weights (std 0.03: every input visibly moves the output, yet a 15-step normalized
rollout stays within 1e-5 of the recompute's peak in fp32). Every LayerNorm of both has
a random affine (weight near 1, bias near 0): with the identity affine, the loop's own
normalization of the encoder's features would be a no-op and go untested.

Preset "tiny" (tests): 64 px frames, a 4 x 4 patch grid, encoder width 32, predictor
width 48, 16 timesteps (context frames + horizon - 1). bench/rollout.py builds its
predictor alone with tiny_predictor.
"""
from __future__ import annotations

from pathlib import Path

import torch

PRESETS = {
    "tiny": dict(encoder=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, crop_size=64,
                              frames_per_clip=4, pred_hidden_size=16, pred_num_hidden_layers=1,
                              pred_num_attention_heads=2, num_pooler_layers=1),
                 predictor=dict(predictor_embed_dim=48, depth=2, num_heads=3, max_timesteps=16)),
}


def random_affines(model: torch.nn.Module) -> None:
    """Every LayerNorm's weight to 1 + N(0, 0.1), its bias to N(0, 0.05) (global RNG)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.copy_(0.05 * torch.randn_like(m.bias))


def tiny_predictor(embed_dim: int, grid: int, seed: int = 0, std: float = 0.03, **shape):
    from engine.models.vjepa2_ac.config import PredictorConfig
    from engine.models.vjepa2_ac.predictor import ACPredictor

    torch.manual_seed(seed)
    model = ACPredictor(PredictorConfig(embed_dim=embed_dim, grid_height=grid, grid_width=grid, **shape))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.ndim == 2:
                p.normal_(0.0, std)
            elif "norm" not in name:
                p.normal_(0.0, 0.02)
    random_affines(model)
    return model.eval()


def make_tiny_vjepa2(directory: str | Path, seed: int = 0, preset: str = "tiny") -> Path:
    from transformers import VJEPA2Config, VJEPA2Model

    from engine.models.vjepa2_ac.checkpoint import save_predictor, write_manifest

    path = Path(directory)
    spec = PRESETS[preset]
    torch.manual_seed(seed)
    cfg = VJEPA2Config(**spec["encoder"])
    encoder = VJEPA2Model(cfg).eval()
    random_affines(encoder)
    encoder.save_pretrained(str(path / "encoder"))
    grid = cfg.crop_size // cfg.patch_size
    save_predictor(tiny_predictor(cfg.hidden_size, grid, seed=seed + 1, **spec["predictor"]), path / "predictor")
    write_manifest(path)
    return path
