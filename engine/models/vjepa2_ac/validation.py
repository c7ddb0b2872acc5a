"""Checks of a world-model request's tensors against the checkpoint's shapes; each
failure is InvalidArgument naming the field (`inputs.frames`, `params.horizon`, ...)."""
from __future__ import annotations

import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.config import EncoderConfig, PredictorConfig
from engine.models.vjepa2_ac.loop import LoopConfig


def _finite(name: str, x: torch.Tensor) -> None:
    if not x.is_floating_point():
        raise InvalidArgument(f"inputs.{name} must be floating point, got {x.dtype}")
    if not torch.isfinite(x).all():
        raise InvalidArgument(f"inputs.{name} contains NaN or infinite values")


def check_frames(name: str, frames: torch.Tensor, cfg: EncoderConfig, loop: LoopConfig,
                 max_timesteps: int | None = None) -> int:
    """frames [F, C, H, W] -> the number of timesteps they encode to (F per frame; F /
    tubelet as a clip, which takes 1 or a multiple of tubelet frames), at most
    max_timesteps when given (context frames: the predictor's positions)."""
    size = cfg.crop_size
    if frames.ndim != 4 or frames.shape[1:] != (cfg.in_chans, size, size):
        raise InvalidArgument(f"inputs.{name} must be [frames, {cfg.in_chans}, {size}, {size}], got "
                              f"{list(frames.shape)}")
    f = frames.shape[0]
    if f == 0:
        raise InvalidArgument(f"inputs.{name} has no frames")
    if loop.frame_encoding == "clip" and f > 1 and f % cfg.tubelet_size:
        raise InvalidArgument(f"inputs.{name} has {f} frames: clip encoding needs 1 or a multiple of "
                              f"{cfg.tubelet_size}")
    steps = loop.num_timesteps(f, cfg.tubelet_size)
    if max_timesteps is not None and steps > max_timesteps:
        raise InvalidArgument(f"inputs.{name} has {f} frames ({steps} timesteps), the predictor serves at most "
                              f"{max_timesteps} timesteps")
    _finite(name, frames)
    return steps


def check_steps(name: str, x: torch.Tensor, cfg: PredictorConfig, min_rows: int) -> None:
    """actions/states [N, action_dim] with N >= min_rows."""
    a = cfg.action_embed_dim
    if x.ndim != 2 or x.shape[1] != a:
        raise InvalidArgument(f"inputs.{name} must be [steps, {a}], got {list(x.shape)}")
    if x.shape[0] < min_rows:
        raise InvalidArgument(f"inputs.{name} has {x.shape[0]} rows, needs at least {min_rows}")
    _finite(name, x)


def check_horizon(horizon: int, num_context: int, cfg: PredictorConfig) -> None:
    """The rollout feeds num_context + horizon - 1 timesteps; the predictor's positions
    cover max_timesteps."""
    if horizon <= 0:
        raise InvalidArgument(f"params.horizon must be >= 1, got {horizon}")
    if num_context + horizon - 1 > cfg.max_timesteps:
        raise InvalidArgument(f"params.horizon {horizon} with {num_context} context timesteps passes the "
                              f"predictor's {cfg.max_timesteps} timesteps (at most "
                              f"{cfg.max_timesteps - num_context + 1})")


def rollout_horizon(requested: int, num_context: int, num_actions: int) -> int:
    """params.horizon, or (0) as many steps as the actions cover."""
    return requested if requested else num_actions - num_context + 1
