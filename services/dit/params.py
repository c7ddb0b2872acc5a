"""Per-request image parameters (a Struct on the wire: numbers arrive as floats) -> ImageParams.

Every component of the text-to-image pipeline validates the same params, so the first
node that sees a bad value fails the request with INVALID_ARGUMENT naming the field
(`params.steps`, `params.guidance`, `params.width`, ...). Light: no torch import.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidArgument

MAX_STEPS = 1000  # the denoising loop's bound (pipelines.text_to_image)
MAX_SIDE = 4096
MAX_T5_LEN = 512  # diffusers' limit for max_sequence_length
_NON_FINITE = ("NaN", "Infinity", "-Infinity")


@dataclass(frozen=True)
class ImageParams:
    """steps: denoising iterations; guidance: CFG scale w (noise = u + w (c - u));
    renorm: 0 off, else the guided prediction's norm is capped at renorm x the
    conditional one's; width/height in pixels; seed of the initial latent."""

    steps: int = 28
    guidance: float = 7.0
    renorm: float = 0.0
    width: int = 1024
    height: int = 1024
    seed: int = 0
    negative_prompt: str = ""
    max_sequence_length: int = 256
    return_float: bool = False  # also emit the float image before uint8 (fidelity checks)

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= MAX_STEPS:
            raise InvalidArgument(f"params.steps must be in [1, {MAX_STEPS}], got {self.steps}")
        for name in ("guidance", "renorm"):
            if not math.isfinite(getattr(self, name)):
                raise InvalidArgument(f"params.{name} must be a finite number, got {getattr(self, name)}")
        if self.renorm < 0:
            raise InvalidArgument(f"params.renorm must be >= 0 (0: off), got {self.renorm}")
        for name in ("width", "height"):
            if not 1 <= getattr(self, name) <= MAX_SIDE:
                raise InvalidArgument(f"params.{name} must be in [1, {MAX_SIDE}], got {getattr(self, name)}")
        if not 1 <= self.max_sequence_length <= MAX_T5_LEN:
            raise InvalidArgument(f"params.max_sequence_length must be in [1, {MAX_T5_LEN}], "
                                  f"got {self.max_sequence_length}")

    def check_size(self, multiple: int, max_side: int = 0) -> None:
        """width and height must be multiples of `multiple` (VAE scale factor x patch size)
        and, when the DiT's position embedding is bounded, at most `max_side`."""
        for name in ("width", "height"):
            if getattr(self, name) % multiple:
                raise InvalidArgument(f"params.{name} must be a multiple of {multiple} (VAE scale factor x patch "
                                      f"size), got {getattr(self, name)}")
            if max_side and getattr(self, name) > max_side:
                raise InvalidArgument(f"params.{name} must be at most {max_side} for this checkpoint (its "
                                      f"position embedding covers that many pixels), got {getattr(self, name)}")

    def latent_shape(self, channels: int, vae_scale_factor: int) -> tuple[int, int, int, int]:
        return (1, channels, self.height // vae_scale_factor, self.width // vae_scale_factor)  # [1, C, h, w]


def _int(params: dict[str, Any], name: str, default: int) -> int:
    value = params.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or float(value) != int(value):
        raise InvalidArgument(f"params.{name} must be an integer, got {value!r}")
    return int(value)


def _float(params: dict[str, Any], name: str, default: float) -> float:
    value = params.get(name)
    if value is None:
        return default
    if value in _NON_FINITE:  # a Struct carries NaN and infinities as these strings (JSON mapping)
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"params.{name} must be a number, got {value!r}")
    return float(value)


def image_params(params: dict[str, Any]) -> ImageParams:
    """Parses and validates the request's params (InvalidArgument names the field)."""
    d = ImageParams()
    negative = params.get("negative_prompt", "")
    if not isinstance(negative, str):
        raise InvalidArgument(f"params.negative_prompt must be a string, got {negative!r}")
    return ImageParams(
        steps=_int(params, "steps", d.steps), guidance=_float(params, "guidance", d.guidance),
        renorm=_float(params, "renorm", d.renorm), width=_int(params, "width", d.width),
        height=_int(params, "height", d.height), seed=_int(params, "seed", d.seed), negative_prompt=negative,
        max_sequence_length=_int(params, "max_sequence_length", d.max_sequence_length),
        return_float=bool(params.get("return_float", False)))
