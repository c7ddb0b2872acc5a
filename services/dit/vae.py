"""The VAE service: SD3's VAE decode (engine.models.sd3.vae) on a StatelessEngine.

    decode   latent [1, C, h, w] -> image uint8 [H, W, 3] (RGB), and with params.return_float
             the float image [H, W, 3] in [0, 1] before the uint8 conversion

Decodes of equal latent shapes batch.
"""
from __future__ import annotations

from typing import Any, Hashable

import torch

from engine.stateless_engine import StatelessConfig
from engine.models.sd3.vae import Sd3Vae, to_rgb8
from services.dit.denoiser import tensor_input
from engine.models.sd3.params import ImageParams
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode
from core.errors import InvalidArgument


class VaeComponent(StatelessComponent):
    name = "vae"
    nodes = ("decode",)

    def __init__(self, model: Sd3Vae, config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model = model

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu",
                        max_batch_size: int = 4, offload=None) -> "VaeComponent":
        """offload (default: the process's): the decoder's blocks stream."""
        return cls(Sd3Vae.load(checkpoint, dtype, device, offload), StatelessConfig(max_batch_size=max_batch_size))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = ImageParams.from_params(item.params)
        latent = tensor_input(inputs, "latent", item.node, 4)
        if latent.shape[1] != self.model.latent_channels:
            raise InvalidArgument(f"open.inputs[latent]: the VAE takes {self.model.latent_channels} latent channels, "
                                  f"got {list(latent.shape)}")
        return ("decode", tuple(latent.shape)), (latent, params.return_float)

    @torch.inference_mode()
    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        images = self.model.decode(torch.cat([p[0] for p in payloads]))  # [B, H, W, 3] in [0, 1]
        rgb = to_rgb8(images)                                             # [B, H, W, 3] uint8
        outputs = []
        for i, (_, return_float) in enumerate(payloads):
            out = {"image": rgb[i].clone()}
            if return_float:
                out["image_float"] = images[i].clone()
            outputs.append(out)
        return outputs
