"""SD3's specifics for the shared vae component (its "vae" hook, cluster/registry.py):
diffusers' AutoencoderKL with the checkpoint's scaling and shift factors
(engine.models.sd3.vae.Sd3Vae), and ImageParams as the request's params."""
from __future__ import annotations

from engine.models.sd3.checkpoint import is_sd3_checkpoint
from engine.models.sd3.params import ImageParams
from engine.models.sd3.vae import Sd3Vae
from services.vae.hook import VaeHook

HOOK = "services.sd3.vae_hook:vae_hook"  # as registered (what make_sd3 hands the vae component)


def vae_hook(checkpoint: str) -> VaeHook | None:
    """SD3's VAE when `checkpoint` is an SD3 pipeline with a vae/ (diffusers layout), else None."""
    if not is_sd3_checkpoint(checkpoint, "vae"):
        return None
    return VaeHook("SD3 AutoencoderKL", Sd3Vae.load, ImageParams.from_params)
