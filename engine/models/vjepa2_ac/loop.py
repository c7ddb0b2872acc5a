"""How the world model turns frames into the predictor's timesteps, and what it feeds back.

Two choices, named in the checkpoint's `config.json` (and overridable per service):

- `frame_encoding`: "per_frame" (the default, the upstream world model's loop): every
  frame is encoded on its own, repeated to fill one tubelet, so F frames give F
  timesteps. "clip": the frames are encoded together as one clip, F / tubelet timesteps
  (a single frame is repeated to one tubelet).
- `normalize_reps` (default true, as upstream): the encoder's features and every
  prediction are layer-normed over the feature axis, without affine parameters, before
  the predictor reads them; a rollout streams the normalized predictions.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.errors import InvalidArgument

FRAME_ENCODINGS = ("per_frame", "clip")


@dataclass(frozen=True)
class LoopConfig:
    frame_encoding: str = "per_frame"
    normalize_reps: bool = True

    def __post_init__(self) -> None:
        if self.frame_encoding not in FRAME_ENCODINGS:
            raise InvalidArgument(f"world.frame_encoding {self.frame_encoding!r} is not one of "
                                  f"{list(FRAME_ENCODINGS)}")
        if not isinstance(self.normalize_reps, bool):
            raise InvalidArgument(f"world.normalize_reps must be true or false, got {self.normalize_reps!r}")

    @classmethod
    def from_dict(cls, data: dict) -> "LoopConfig":
        """The fields present in `data` (a checkpoint manifest or service options)."""
        return cls(**{k: data[k] for k in ("frame_encoding", "normalize_reps") if k in data})

    def num_timesteps(self, num_frames: int, tubelet_size: int) -> int:
        if self.frame_encoding == "per_frame":
            return num_frames
        return max(1, num_frames // tubelet_size)


def normalize(x: torch.Tensor) -> torch.Tensor:
    """Layer norm over the last axis without affine parameters (eps 1e-5, as upstream),
    computed in fp32 (as under autocast) and returned in x's dtype."""
    return F.layer_norm(x.float(), (x.shape[-1],)).to(x.dtype)


def encode_frames(encoder, frames: torch.Tensor, loop: LoopConfig) -> torch.Tensor:
    """frames [F, C, H, W] (encoder device and dtype) -> features [T, HW, D]."""
    tubelet = encoder.config.tubelet_size
    if loop.frame_encoding == "per_frame":
        clips = frames[:, None].expand(-1, tubelet, -1, -1, -1)   # [F, tubelet, C, H, W]: one clip per frame
        feats = encoder(clips)                                    # [F, HW, D]
    else:
        g = encoder.config.grid_size
        feats = encoder(frames[None])[0].unflatten(0, (-1, g * g))  # [F / tubelet, HW, D]
    return normalize(feats) if loop.normalize_reps else feats
