"""SD3's specifics for the shared dit component (its "dit" hook, cluster/registry.py).

Two guidance branches, cond and uncond (nodes denoise_cond, denoise_uncond; the fused
loop takes the uncond branch's conditioning as negative_embeds, negative_pooled), each
conditioned on embeds [1, S, D] and pooled [1, P]. A batch is one MMDiT forward with
per-sample timesteps (engine.models.sd3.dit); combine is CFG u + w (c - u), optional
renormalisation, and the flow-matching Euler step on the request's (steps, size) schedule
(engine.models.sd3.guidance, engine.models.sd3.schedule). Params: ImageParams, checked
against the checkpoint's geometry (size multiple, largest side).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Hashable, Mapping

import torch

from core.errors import InvalidArgument
from engine.models.sd3.checkpoint import is_sd3_checkpoint
from engine.models.sd3.dit import DenoiseInput, Sd3Dit
from engine.models.sd3.guidance import euler_step, guide
from engine.models.sd3.params import ImageParams
from services.dit.hook import Branch, Conditioning, DitHook

HOOK = "services.sd3.dit_hook:dit_hook"  # as registered (what make_sd3 hands the dit component)
BRANCHES = (Branch("cond"), Branch("uncond", loop_prefix="negative_"))
CONDITIONING = (Conditioning("embeds", 3), Conditioning("pooled", 2))  # [1, S, D], [1, P]


class Sd3Denoiser:
    """services.dit.hook.Denoiser over an Sd3Dit."""

    branches = BRANCHES
    conditioning = CONDITIONING

    def __init__(self, dit: Sd3Dit) -> None:
        self.dit = dit
        self.transformer, self.schedule, self.geometry = dit.transformer, dit.schedule, dit.geometry

    @classmethod
    def load(cls, checkpoint: str | Path, dtype: str = "float32", device: str = "cpu", offload=None,
             group=None) -> "Sd3Denoiser":
        return cls(Sd3Dit.load(checkpoint, dtype, device, offload, group=group))

    @property
    def offload_backend(self) -> Any:
        return getattr(self.transformer, "offload_backend", None)

    def parse_params(self, params: Mapping[str, Any]) -> ImageParams:
        parsed = ImageParams.from_params(params)
        parsed.check_size(self.geometry.size_multiple, self.geometry.max_side)
        return parsed

    def latent_shape(self, params: ImageParams) -> tuple[int, int, int, int]:
        return params.latent_shape(self.geometry.latent_channels, self.geometry.vae_scale_factor)  # [1, C, h, w]

    def initial_latent(self, params: ImageParams) -> torch.Tensor:
        return self.dit.initial_latent(self.latent_shape(params), params.seed)  # [1, C, h, w]

    def check_conditioning(self, conditioning: Mapping[str, torch.Tensor], node: str, prefix: str = "") -> None:
        embeds, pooled = conditioning["embeds"], conditioning["pooled"]  # [1, S, D], [1, P]
        if (embeds.shape[-1], pooled.shape[-1]) != self.dit.embed_dims:
            raise InvalidArgument(f"open.inputs: {prefix}embeds [1, S, D] and {prefix}pooled [1, P] need (D, P) = "
                                  f"{self.dit.embed_dims}, got {list(embeds.shape)} and {list(pooled.shape)}")

    def denoise_work(self, branch: str, latent: torch.Tensor, conditioning: Mapping[str, torch.Tensor],
                     params: ImageParams, k: int) -> tuple[Hashable, DenoiseInput]:
        # either branch of any request batches with another of the same latent and text shapes
        embeds = conditioning["embeds"]
        timestep = self.schedule.get(params.steps, latent.shape[-2:]).timesteps[k]
        return (tuple(latent.shape), tuple(embeds.shape)), DenoiseInput(latent, embeds, conditioning["pooled"],
                                                                         timestep)

    def denoise(self, batch: list[DenoiseInput]) -> list[torch.Tensor]:
        return self.dit.denoise(batch)  # the velocity [1, C, h, w] of each sample

    def combine(self, latent: torch.Tensor, noise: Mapping[str, torch.Tensor], params: ImageParams,
                k: int) -> torch.Tensor:
        schedule = self.schedule.get(params.steps, latent.shape[-2:])
        guided = guide(noise["cond"], noise["uncond"], params.guidance, params.renorm)  # [1, C, h, w]
        return euler_step(latent, guided, schedule.sigmas[k], schedule.sigmas[k + 1])

    def pad_forward(self) -> None:
        self.dit.pad_forward()


def dit_hook(checkpoint: str) -> DitHook | None:
    """SD3's dit specifics when `checkpoint` is an SD3 pipeline (diffusers layout), else None."""
    if not is_sd3_checkpoint(checkpoint):
        return None
    return DitHook("SD3 MMDiT", Sd3Denoiser.load)
