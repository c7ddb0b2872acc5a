"""BAGEL's autoencoder on the shared vae component (its "vae" hook): ae.safetensors, the
FLUX key layout converted onto diffusers' AutoencoderKL (engine/models/bagel/flux_vae.py),
with BAGEL's scale and shift; encode draws the posterior sample from
Generator(params.seed + 1) (BagelParams.posterior_seed), as the in-process runner does."""
from __future__ import annotations

from pathlib import Path

from engine.models.bagel import AE_WEIGHTS
from engine.models.bagel.params import BagelParams
from services.bagel.checkpoint import is_bagel_checkpoint
from services.vae.hook import VaeHook


def load(checkpoint: str, dtype: str = "float32", device: str = "cpu", offload=None):
    from engine.models.bagel.flux_vae import load_flux_vae

    return load_flux_vae(Path(checkpoint) / AE_WEIGHTS, dtype, device)


def vae_hook(checkpoint: str) -> VaeHook | None:
    if not is_bagel_checkpoint(checkpoint):
        return None
    return VaeHook("BAGEL FLUX autoencoder", load, BagelParams.from_params)
