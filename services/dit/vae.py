"""The VAE service: SD3's AutoencoderKL decode (through diffusers) on a StatelessEngine.

    decode   latent [1, C, h, w] -> image uint8 [H, W, 3] (RGB), and with params.return_float
             the float image [H, W, 3] in [0, 1] before the uint8 conversion

The latent is unscaled with the checkpoint's factors (latent / scaling_factor +
shift_factor), decoded, denormalised ([-1, 1] -> [0, 1], clamped) and rounded to uint8
as StableDiffusion3Pipeline's image processor does. Decodes of equal latent shapes batch.
"""
from __future__ import annotations

from typing import Any, Hashable

import torch

from engine.stateless_engine import StatelessConfig
from engine.models.sd3.checkpoint import attach_model_offload, load_model
from services.dit.denoiser import tensor_input
from services.dit.params import image_params
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode
from core.errors import InvalidArgument


class VaeComponent(StatelessComponent):
    name = "vae"
    nodes = ("decode",)

    def __init__(self, vae, device: str = "cpu", config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.vae = vae
        self.device = torch.device(device)
        cfg = vae.config
        if cfg.shift_factor is None:
            raise InvalidArgument("vae config: shift_factor is not set (SD3 decodes latent / scaling + shift)")
        self.scaling_factor, self.shift_factor = float(cfg.scaling_factor), float(cfg.shift_factor)
        self.latent_channels = int(cfg.latent_channels)

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu",
                        max_batch_size: int = 4, offload=None) -> "VaeComponent":
        """offload (default: the process's): the decoder's blocks stream (the service never
        runs the encoder, so only the decode path is planned)."""
        from diffusers import AutoencoderKL

        from engine.offload.loading import effective_config

        vae = load_model(AutoencoderKL, checkpoint, "vae", dtype, device)
        vae.offload_backend = attach_model_offload(vae.decoder, checkpoint, "vae", effective_config(offload, "stateless"),
                                                   prefix="decoder.")
        return cls(vae, device, StatelessConfig(max_batch_size=max_batch_size))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = image_params(item.params)
        latent = tensor_input(inputs, "latent", item.node, 4)
        if latent.shape[1] != self.latent_channels:
            raise InvalidArgument(f"open.inputs[latent]: the VAE takes {self.latent_channels} latent channels, "
                                  f"got {list(latent.shape)}")
        return ("decode", tuple(latent.shape)), (latent, params.return_float)

    @torch.inference_mode()
    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        latents = torch.cat([p[0] for p in payloads]).to(self.device, self.vae.dtype)  # [B, C, h, w]
        latents = latents / self.scaling_factor + self.shift_factor
        decoded = self.vae.decode(latents, return_dict=False)[0]                      # [B, 3, H, W] in [-1, 1]
        images = (decoded * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).float().cpu()    # [B, H, W, 3] in [0, 1]
        rgb = (images * 255).round().to(torch.uint8)                                   # [B, H, W, 3]
        outputs = []
        for i, (_, return_float) in enumerate(payloads):
            out = {"image": rgb[i].clone()}
            if return_float:
                out["image_float"] = images[i].clone()
            outputs.append(out)
        return outputs
