"""The VAE service: a model's autoencoder (loaded through its vae hook, services/vae/hook.py)
on a StatelessEngine.

    decode   latent [1, C, h, w] -> image uint8 [H, W, 3] (RGB), and with params.return_float
             the float image [H, W, 3] in [0, 1] before the uint8 conversion
    encode   image uint8 [H, W, 3] (RGB), or float [H, W, 3] in [0, 1] -> latent [1, C, h, w]
             (what decode takes back and a DiT denoises: an image to edit, a reference): the
             distribution's mode, or a posterior sample from Generator(params.posterior_seed)
             when the model's params have one (each such encode its own run)

Decodes of equal latent shapes batch; encodes of equal image sizes batch.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping

import torch

from engine.stateless_engine import StatelessConfig
from services.model_hooks import first_hook
from services.vae.hook import Autoencoder, VaeHook
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode
from core.errors import InvalidArgument


def to_rgb8(images: torch.Tensor) -> torch.Tensor:
    """images [B, H, W, 3] in [0, 1] -> uint8 [B, H, W, 3], rounded to nearest."""
    return (images * 255).round().to(torch.uint8)


def latent_input(inputs: dict, node: str, channels: int) -> torch.Tensor:
    if "latent" not in inputs:
        raise InvalidArgument(f"open.inputs: node {node} needs 'latent' (got {sorted(inputs)})")
    latent = inputs["latent"]
    if latent.dim() != 4 or latent.shape[0] != 1 or not latent.is_floating_point():
        raise InvalidArgument(f"open.inputs[latent]: node {node} takes a float [1, C, h, w] tensor, "
                              f"got {latent.dtype} {list(latent.shape)}")
    if latent.shape[1] != channels:
        raise InvalidArgument(f"open.inputs[latent]: the VAE takes {channels} latent channels, "
                              f"got {list(latent.shape)}")
    return latent


def image_input(inputs: dict, node: str, scale_factor: int) -> torch.Tensor:
    """The image as float32 [1, H, W, 3] in [0, 1]; its sides must be multiples of the
    VAE's scale factor (each latent cell covers that many pixels)."""
    if "image" not in inputs:
        raise InvalidArgument(f"open.inputs: node {node} needs 'image' (got {sorted(inputs)})")
    image = inputs["image"]
    if image.dim() != 3 or image.shape[-1] != 3 or not (image.dtype == torch.uint8 or image.is_floating_point()):
        raise InvalidArgument(f"open.inputs[image]: node {node} takes RGB uint8 [H, W, 3] or float [H, W, 3] in "
                              f"[0, 1], got {image.dtype} {list(image.shape)}")
    height, width = image.shape[:2]
    if height % scale_factor or width % scale_factor or not (height and width):
        raise InvalidArgument(f"open.inputs[image]: height and width must be positive multiples of {scale_factor} "
                              f"(the VAE scale factor), got {height}x{width}")
    if image.dtype == torch.uint8:
        return (image.float() / 255).unsqueeze(0)
    image = image.float()
    if not bool(((image >= 0) & (image <= 1)).all()):
        raise InvalidArgument(f"open.inputs[image]: a float image must lie in [0, 1] (got values in "
                              f"[{image.min().item():.3g}, {image.max().item():.3g}])")
    return image.unsqueeze(0)


class VaeComponent(StatelessComponent):
    name = "vae"
    nodes = ("decode", "encode")

    def __init__(self, model: Autoencoder, parse_params: Callable[[Mapping[str, Any]], Any],
                 config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model = model
        self.parse_params = parse_params

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str = "float32", device: str = "cpu",
                        max_batch_size: int = 4, offload=None, hooks: tuple[str, ...] = ()) -> "VaeComponent":
        """hooks: the registered models' vae hooks (cluster.registry passes them); the first
        that recognises the checkpoint loads it. offload (default: the process's): the
        decoder's blocks stream."""
        hook = first_hook(hooks, checkpoint, VaeHook, "vae", "an autoencoder checkpoint of a registered model")
        return cls(hook.load(checkpoint, dtype, device, offload), hook.parse_params,
                   StatelessConfig(max_batch_size=max_batch_size))

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        params = self.parse_params(item.params)
        if item.node == "encode":
            image = image_input(inputs, item.node, self.model.scale_factor)  # [1, H, W, 3]
            # a model whose params name a posterior seed gets a seeded sample of each image
            seed = getattr(params, "posterior_seed", None)
            return ("encode", tuple(image.shape), seed), image
        latent = latent_input(inputs, item.node, self.model.latent_channels)
        return ("decode", tuple(latent.shape)), (latent, bool(getattr(params, "return_float", False)))

    @torch.inference_mode()
    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        if key[0] == "encode":
            seed = key[2]
            if seed is not None:  # a fresh generator each: every image gets its solo sample
                return [{"latent": self.model.encode(p, torch.Generator().manual_seed(seed))} for p in payloads]
            latents = self.model.encode(torch.cat(payloads))  # [B, C, h, w]
            return [{"latent": latents[i:i + 1].clone()} for i in range(len(payloads))]
        images = self.model.decode(torch.cat([p[0] for p in payloads]))  # [B, H, W, 3] in [0, 1]
        rgb = to_rgb8(images)                                             # [B, H, W, 3] uint8
        outputs = []
        for i, (_, return_float) in enumerate(payloads):
            out = {"image": rgb[i].clone()}
            if return_float:
                out["image_float"] = images[i].clone()
            outputs.append(out)
        return outputs
