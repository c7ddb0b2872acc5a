"""The reference rollout: at every step the whole growing sequence goes through the
predictor's full block-causal pass again (no cache), as the upstream rollout does; with
normalize_reps each prediction is layer-normed before it is kept and fed back."""
from __future__ import annotations

import torch

from engine.models.vjepa2_ac.loop import normalize
from engine.models.vjepa2_ac.predictor import ACPredictor


def recompute_rollout(predictor: ACPredictor, feats: torch.Tensor, actions: torch.Tensor, states: torch.Tensor,
                      horizon: int, normalize_reps: bool = True) -> torch.Tensor:
    """feats [B, T_c, HW, D], actions/states [B, T_c + horizon - 1, A] -> predictions
    [B, horizon, HW, D] (prediction k is timestep T_c + k's features)."""
    b, t_c, hw, d = feats.shape
    z = feats
    preds = []
    for k in range(horizon):
        t = t_c + k
        out = predictor(z.flatten(1, 2), actions[:, :t], states[:, :t])[:, -hw:]    # [B, HW, D]
        preds.append(normalize(out) if normalize_reps else out)
        z = torch.cat([z, preds[-1][:, None]], dim=1)
    return torch.stack(preds, dim=1)
