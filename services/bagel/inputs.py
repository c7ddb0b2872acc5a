"""The BAGEL component's inputs, checked at open (INVALID_ARGUMENT naming the input)."""
from __future__ import annotations

from typing import Any, Mapping

import torch

from core.errors import InvalidArgument
from services.encoder.media_list import unpack_encoded, unpack_media

MAX_PROMPT_BYTES = 64 << 10


def prompt_text(inputs: Mapping[str, Any], node: str) -> str:
    """The prompt's UTF-8 bytes (uint8 [n], n >= 1) as text."""
    prompt = inputs.get("prompt")
    if not isinstance(prompt, torch.Tensor) or prompt.dtype != torch.uint8 or prompt.dim() != 1 or not prompt.numel():
        raise InvalidArgument(f"open.inputs[prompt]: node {node} takes the prompt's UTF-8 bytes as uint8 [n >= 1]")
    if prompt.numel() > MAX_PROMPT_BYTES:
        raise InvalidArgument(f"open.inputs[prompt]: at most {MAX_PROMPT_BYTES} bytes, got {prompt.numel()}")
    try:
        return prompt.numpy().tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"open.inputs[prompt]: not UTF-8 ({e.reason} at byte {e.start})") from None


def vit_images(inputs: Mapping[str, Any], hidden: int) -> list[torch.Tensor]:
    """The encoder's outputs (rows, deepstack, parts, seconds) -> each image's ViT rows [n_i, hidden]."""
    parts = unpack_encoded(inputs)
    out = []
    for i, (kind, part) in enumerate(parts):
        if kind != "image" or part.rows.shape[1] != hidden:
            raise InvalidArgument(f"open.inputs[parts][{i}]: BAGEL takes images encoded to {hidden}-wide rows, "
                                  f"got {kind} rows {list(part.rows.shape)}")
        out.append(part.rows)
    if not out:
        raise InvalidArgument("open.inputs[parts]: no image")
    return out


def one_image(inputs: Mapping[str, Any]):
    """The one image part of media / media_parts, decoded (an edit takes one image)."""
    from PIL import Image, UnidentifiedImageError
    import io

    parts = unpack_media(inputs)
    images = [p for p in parts if p.kind == "image"]
    if len(images) != 1 or len(parts) != 1:
        raise InvalidArgument(f"open.inputs[media_parts]: an edit takes exactly one image, got "
                              f"{[p.kind for p in parts]}")
    try:
        image = Image.open(io.BytesIO(images[0].data))
        image.load()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise InvalidArgument(f"{images[0].field}: not a decodable image ({e})") from None
    return image


def latent_input(inputs: Mapping[str, Any], channels: int) -> torch.Tensor:
    """The VAE's latent [1, C, h, w] -> [C, h, w]."""
    latent = inputs.get("latent")
    if not isinstance(latent, torch.Tensor) or latent.dim() != 4 or latent.shape[:2] != (1, channels) \
            or not latent.is_floating_point():
        raise InvalidArgument(f"open.inputs[latent]: a float [1, {channels}, h, w] latent, got "
                              f"{getattr(latent, 'dtype', None)} {list(getattr(latent, 'shape', ()))}")
    return latent[0].float()


def size_input(inputs: Mapping[str, Any], node: str) -> tuple[int, int]:
    size = inputs.get("size")
    if not isinstance(size, torch.Tensor) or size.shape != (2,) or size.dtype != torch.int64:
        raise InvalidArgument(f"open.inputs[size]: node {node} takes int64 [2] (height, width)")
    return int(size[0]), int(size[1])
