"""What a model gives the shared vae component through its "vae" hook.

The hook ("module:callable", registered in cluster/registry.py) takes the checkpoint
directory and returns a `VaeHook` when the checkpoint is that model's, else None:

    hook(checkpoint) -> VaeHook(model, load, parse_params) | None
    load(checkpoint, dtype, device, offload) -> Autoencoder

The `Autoencoder` maps between the model's latent space (what its DiT denoises, with the
model's scaling and shift already applied) and images as [B, H, W, 3] float in [0, 1].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

import torch


class Autoencoder(Protocol):
    latent_channels: int  # C of a latent [B, C, h, w]
    scale_factor: int     # pixels per latent cell (H = h * scale_factor)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, h, w] -> images [B, H, W, 3] float32 in [0, 1], on CPU."""

    def encode(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """images [B, H, W, 3] float32 in [0, 1] -> latents [B, C, h, w] float32, on CPU
        (the latent distribution's mode; with a generator, a posterior sample drawn from it)."""


@dataclass(frozen=True)
class VaeHook:
    """What a model's vae hook returns for a checkpoint of its own."""

    model: str                                      # what the checkpoint holds, for errors
    load: Callable[..., Autoencoder]                # (checkpoint, dtype, device, offload) -> Autoencoder
    parse_params: Callable[[Mapping[str, Any]], Any]  # the request's params, checked; decode reads .return_float

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("VaeHook.model must name what the checkpoint holds")
        for name in ("load", "parse_params"):
            if not callable(getattr(self, name)):
                raise ValueError(f"VaeHook.{name} must be callable, got {getattr(self, name)!r}")
