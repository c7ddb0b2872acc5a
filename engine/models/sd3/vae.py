"""SD3's VAE (diffusers' `AutoencoderKL`): decode, encode and the image conversion.

Decode: the latent is unscaled with the checkpoint's factors (latent / scaling_factor +
shift_factor), decoded, denormalised ([-1, 1] -> [0, 1], clamped) and rounded to uint8
as StableDiffusion3Pipeline's image processor does. Encode is the inverse path: the image
normalised to [-1, 1], encoded, the latent distribution's mode taken and scaled
((z - shift_factor) * scaling_factor), as diffusers' image-to-image pipelines do.
"""
from __future__ import annotations

from pathlib import Path

import torch

from core.errors import InvalidArgument
from engine.models.sd3.checkpoint import attach_model_offload, load_model


class Sd3Vae:
    def __init__(self, vae, device: str = "cpu") -> None:
        self.vae = vae
        self.device = torch.device(device)
        cfg = vae.config
        if cfg.shift_factor is None:
            raise InvalidArgument("vae config: shift_factor is not set (SD3 decodes latent / scaling + shift)")
        self.scaling_factor, self.shift_factor = float(cfg.scaling_factor), float(cfg.shift_factor)
        self.latent_channels = int(cfg.latent_channels)
        self.scale_factor = 2 ** (len(cfg.block_out_channels) - 1)  # pixels per latent cell

    @classmethod
    def load(cls, checkpoint: str | Path, dtype: str = "float32", device: str = "cpu", offload=None) -> "Sd3Vae":
        """offload (default: the process's): the decoder's blocks stream (the encoder, which
        only image inputs run, stays resident)."""
        from diffusers import AutoencoderKL

        from engine.offload.loading import effective_config

        vae = load_model(AutoencoderKL, checkpoint, "vae", dtype, device)
        vae.offload_backend = attach_model_offload(vae.decoder, checkpoint, "vae",
                                                   effective_config(offload, "stateless"), prefix="decoder.")
        return cls(vae, device)

    @torch.inference_mode()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [B, C, h, w] -> images [B, H, W, 3] float32 in [0, 1], on CPU."""
        latents = latents.to(self.device, self.vae.dtype) / self.scaling_factor + self.shift_factor
        decoded = self.vae.decode(latents, return_dict=False)[0]                  # [B, 3, H, W] in [-1, 1]
        return (decoded * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).float().cpu()  # [B, H, W, 3] in [0, 1]

    @torch.inference_mode()
    def encode(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """images [B, H, W, 3] in [0, 1] -> latents [B, C, H / f, W / f] float32, on CPU:
        the mode of the latent distribution (deterministic), scaled as decode unscales.
        generator: a posterior sample instead, mean + std * noise with the noise drawn from
        it (diffusers' DiagonalGaussianDistribution.sample)."""
        pixels = images.permute(0, 3, 1, 2).to(self.device, self.vae.dtype) * 2 - 1  # [B, 3, H, W] in [-1, 1]
        posterior = self.vae.encode(pixels, return_dict=False)[0]
        z = posterior.mode() if generator is None else posterior.sample(generator)
        latents = (z - self.shift_factor) * self.scaling_factor                       # [B, C, h, w]
        return latents.float().cpu()

