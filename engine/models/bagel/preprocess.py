"""BAGEL's image preprocessing: resizing, normalization, patches and their position ids.

Resize (upstream's rule, `ResizeRule.shape`): scale = min(max_size / long side, 1), raised
to min_size / short side if that is larger; each side rounded, then to the nearest multiple
of `stride` (at least one stride); if the area then exceeds max_pixels, or the long side
max_size, the result is scaled down again the same way. The pixels are resized bicubic
(PIL, antialiased), made RGB (transparency composited over white), and normalized
(x / 255 - 0.5) / 0.5 to [-1, 1], [3, H, W] float32.

Defaults (overridable by the caller):
    VAE side  ResizeRule(max_size=1024, min_size=512, stride=16)   (max_pixels 14*14*9*1024)
    ViT side  ResizeRule(max_size=980, min_size=224, stride=14); patch 14 on a 70-per-side grid
    latents   8x downsampling, 2x2 latent patches, max_latent_size 64 per side
An image goes in through the VAE rule first; its ViT input is that resized image resized
again by the ViT rule (as upstream feeds both); an edit's output has the VAE-resized size.

Patches are flattened (row, col, channel) in row-major order, position id row *
max_per_side + col; latents [C, h, w] patchify the same way into [h/p * w/p, p*p*C].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.errors import InvalidArgument

MAX_PIXELS = 14 * 14 * 9 * 1024


@dataclass(frozen=True)
class ResizeRule:
    max_size: int
    min_size: int
    stride: int
    max_pixels: int = MAX_PIXELS

    def __post_init__(self) -> None:
        if min(self.max_size, self.min_size, self.stride, self.max_pixels) < 1 or self.min_size > self.max_size:
            raise InvalidArgument(f"resize rule: need 1 <= min_size <= max_size, stride >= 1, max_pixels >= 1; "
                                  f"got {self}")

    def _fit(self, width: float, height: float, scale: float) -> tuple[int, int]:
        # Python's round (half to even) at both steps, as upstream
        return tuple(max(self.stride, int(round(round(side * scale) / self.stride) * self.stride))
                     for side in (width, height))

    def shape(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of an image of that size after resizing."""
        if width < 1 or height < 1:
            raise InvalidArgument(f"image: width and height must be >= 1, got {width}x{height}")
        scale = max(min(self.max_size / max(width, height), 1.0), self.min_size / min(width, height))
        width, height = self._fit(width, height, scale)
        if width * height > self.max_pixels:
            width, height = self._fit(width, height, self.max_pixels / (width * height))
        if max(width, height) > self.max_size:
            width, height = self._fit(width, height, self.max_size / max(width, height))
        return width, height


VAE_RESIZE = ResizeRule(max_size=1024, min_size=512, stride=16)
VIT_RESIZE = ResizeRule(max_size=980, min_size=224, stride=14)


def to_rgb(image):
    """A PIL image as RGB; transparent pixels over a white background."""
    from PIL import Image

    if image.mode == "RGBA" or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.split()[3])
        return white
    return image.convert("RGB")


def resize(image, rule: ResizeRule):
    """An RGB PIL image resized by `rule` (bicubic); unchanged size gives a copy."""
    from PIL import Image

    return image.resize(rule.shape(*image.size), Image.BICUBIC)


def vae_resize(image, rule: ResizeRule = VAE_RESIZE):
    """Any PIL image as BAGEL takes it in: RGB, resized by the VAE rule. Its normalized
    pixels go to the VAE; the ViT takes it resized again (vit_image); an edit's output has its size."""
    return resize(to_rgb(image), rule)


def normalize(image) -> torch.Tensor:
    """RGB PIL image -> [3, H, W] float32 in [-1, 1]: (x / 255 - 0.5) / 0.5."""
    pixels = torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).float()  # [3, H, W]
    return pixels.div(255).sub(0.5).div(0.5)


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[C, H, W] -> [H/p * W/p, p * p * C]: patches row-major, each flattened (row, col, channel)."""
    c, h, w = x.shape
    if h % patch or w % patch:
        raise InvalidArgument(f"patchify: {h}x{w} is not a multiple of the patch size {patch}")
    return x.reshape(c, h // patch, patch, w // patch, patch).permute(1, 3, 2, 4, 0).reshape(-1, patch * patch * c)


def unpatchify(tokens: torch.Tensor, rows: int, cols: int, patch: int) -> torch.Tensor:
    """patchify's inverse: [rows * cols, p * p * C] -> [C, rows * p, cols * p]."""
    c = tokens.shape[1] // (patch * patch)
    return tokens.reshape(rows, cols, patch, patch, c).permute(4, 0, 2, 1, 3).reshape(c, rows * patch, cols * patch)


def position_ids(rows: int, cols: int, max_per_side: int, field: str) -> torch.Tensor:
    """[rows * cols] ids row * max_per_side + col; a grid past max_per_side is refused naming `field`."""
    if rows > max_per_side or cols > max_per_side:
        raise InvalidArgument(f"{field}: a {rows}x{cols} patch grid exceeds the {max_per_side} patches per side "
                              "the position table covers")
    return (torch.arange(rows)[:, None] * max_per_side + torch.arange(cols)[None, :]).flatten()


@dataclass(frozen=True)
class VitImage:
    pixels: torch.Tensor        # [N, patch * patch * 3]
    position_ids: torch.Tensor  # [N]
    grid: tuple[int, int]       # (rows, cols) of patches


def vit_image(image, patch: int = 14, max_num_patch_per_side: int = 70, rule: ResizeRule = VIT_RESIZE,
              field: str = "image") -> VitImage:
    """An RGB PIL image (already VAE-resized, as upstream feeds the ViT) -> the ViT's input."""
    pixels = normalize(resize(image, rule))  # [3, H, W]
    rows, cols = pixels.shape[1] // patch, pixels.shape[2] // patch
    ids = position_ids(rows, cols, max_num_patch_per_side, field)
    return VitImage(patchify(pixels, patch), ids, (rows, cols))


@dataclass(frozen=True)
class LatentGrid:
    """An image size's latent tokens: (rows, cols) of latent patches and their position ids."""

    height: int
    width: int
    rows: int
    cols: int
    position_ids: torch.Tensor  # [rows * cols]


def latent_grid(height: int, width: int, downsample: int = 8, latent_patch_size: int = 2, max_latent_size: int = 64,
                field: str = "size") -> LatentGrid:
    """The latent tokens of an image of height x width pixels; a side that is not a multiple
    of downsample * latent_patch_size, or a grid past max_latent_size, is refused naming `field`."""
    step = downsample * latent_patch_size
    if height < step or width < step or height % step or width % step:
        raise InvalidArgument(f"{field}: {width}x{height} must have sides that are positive multiples of {step} "
                              f"(the VAE's {downsample}x downsampling times the {latent_patch_size}x"
                              f"{latent_patch_size} latent patch)")
    rows, cols = height // step, width // step
    if max(rows, cols) > max_latent_size:
        raise InvalidArgument(f"{field}: {width}x{height} makes a {cols}x{rows} latent grid, larger than "
                              f"max_latent_size {max_latent_size} per side (at most {max_latent_size * step} pixels)")
    return LatentGrid(height, width, rows, cols, position_ids(rows, cols, max_latent_size, field))
