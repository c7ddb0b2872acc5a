"""Arithmetic (multiply-add x 2) of a V-JEPA 2-AC rollout, recompute vs KV reuse.

Counted as the two methods compute: the predictor's projections and MLP (24 D^2 per
token and layer), the attention score and value products (4 q k D per layer, dense:
the recompute pass and a prefill evaluate every query/key pair and mask the rest),
the input embedding of every fed patch token (2 E D) and the output head of every
patch token that is projected back (2 D E). Norms, RoPE and softmax are left out."""
from __future__ import annotations

from engine.models.vjepa2_ac.config import PredictorConfig


def _forward(cfg: PredictorConfig, num_new: int, num_keys: int, num_head: int) -> float:
    """num_new tokens through every layer against num_keys keys; num_head patch tokens projected back."""
    d, e = cfg.predictor_embed_dim, cfg.embed_dim
    layers = cfg.depth * (24 * d * d * num_new + 4 * num_new * num_keys * d)
    patches_in = num_new * cfg.num_patches // cfg.tokens_per_step
    return layers + 2 * e * d * patches_in + 2 * d * e * num_head


def recompute_flops(cfg: PredictorConfig, num_context: int, horizon: int) -> float:
    s, hw = cfg.tokens_per_step, cfg.num_patches
    return sum(_forward(cfg, (num_context + k) * s, (num_context + k) * s, (num_context + k) * hw)
               for k in range(horizon))


def cached_flops(cfg: PredictorConfig, num_context: int, horizon: int) -> float:
    s, hw = cfg.tokens_per_step, cfg.num_patches
    prefill = _forward(cfg, num_context * s, num_context * s, hw)
    return prefill + sum(_forward(cfg, s, (num_context + k) * s, hw) for k in range(1, horizon))
