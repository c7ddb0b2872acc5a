"""A text-to-image request's params (steps, guidance, size, seed, ...), parsed once per node.

Every component of the text-to-image pipeline reads the same params, so the first node
that sees a bad value fails the request with INVALID_ARGUMENT naming the key
(`params.steps`, `params.guidance`, `params.width`, ...). Light: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import InvalidArgument
from core.params import RequestParams, param

MAX_STEPS = 1000  # the denoising loop's bound (pipelines.sd3.model)
MAX_SIDE = 4096
MAX_T5_LEN = 512  # diffusers' limit for max_sequence_length
# The longest prompt the text encoders read, in UTF-8 bytes: far past the 77 CLIP and 512 T5
# tokens they keep (the rest is cut after tokenizing), so bounding the bytes first refuses
# only prompts whose tokenization alone would cost the text service seconds (~3 s a MiB).
MAX_PROMPT_BYTES = 64 << 10


@dataclass(frozen=True)
class ImageParams(RequestParams):
    """Defaults follow diffusers' StableDiffusion3Pipeline."""

    steps: int = param(28, min=1, max=MAX_STEPS, help="denoising iterations")
    guidance: float = param(7.0, help="CFG scale w: noise = u + w (c - u)")
    renorm: float = param(0.0, min=0, help="0: off; else the guided prediction's norm is capped at renorm x "
                                           "the conditional one's")
    width: int = param(1024, min=1, max=MAX_SIDE, help="pixels")
    height: int = param(1024, min=1, max=MAX_SIDE, help="pixels")
    seed: int = param(0, help="seed of the initial latent")
    negative_prompt: str = param("", help="the unconditional branch's prompt")
    max_sequence_length: int = param(256, min=1, max=MAX_T5_LEN, help="T5 tokens")
    return_float: bool = param(False, help="also emit the float image before uint8 (fidelity checks)")

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
