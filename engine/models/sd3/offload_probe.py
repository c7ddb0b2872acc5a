"""SD3's loader for the offload weights probe (engine.offload.probe --loader
engine.models.sd3.offload_probe:load_dit): the DiT as the dit service loads it, and one
small denoising call. diffusers' classes are imported with this module, before the
probe's memory baseline (they are ~100 MiB of pages that are not weights)."""
from __future__ import annotations

from pathlib import Path

import torch
from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel  # noqa: F401  (before the baseline)

from engine.models.sd3.dit import DenoiseInput, Sd3Dit


def load_dit(checkpoint: str) -> tuple[Sd3Dit, object, list[str]]:
    """(the loaded DiT, its offload backend or None, its safetensors files) after one
    denoising call of batch 1 on an 8 x 8 latent (every block's pages are read).
    diffusers' loader leaves every parameter a view of its file's mapping, so the files
    are weight files with any backing (resident parameters keep the mapping alive)."""
    dit = Sd3Dit.load(checkpoint)
    g = torch.Generator().manual_seed(0)
    latent = torch.randn(1, dit.geometry.latent_channels, 8, 8, generator=g)   # [1, C, h, w]
    embeds = torch.randn(1, 8, dit.embed_dims[0], generator=g)                 # [1, S, D]
    pooled = torch.randn(1, dit.embed_dims[1], generator=g)                    # [1, P]
    dit.denoise([DenoiseInput(latent, embeds, pooled, torch.tensor(500.0))])
    files = sorted(str(f) for f in (Path(checkpoint) / "transformer").glob("*.safetensors"))
    return dit, dit.transformer.offload_backend, files
