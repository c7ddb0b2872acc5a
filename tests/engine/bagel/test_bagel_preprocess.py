"""BAGEL's preprocessing: resize sizes as upstream's rule gives them (worked examples,
half-to-even rounding included, and properties over all sizes), pixels as PIL's bicubic
resize normalized with mean and std 0.5, patches and position ids, and the refusal of
sizes whose latent grid exceeds max_latent_size, naming the field."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from core.errors import InvalidArgument
from engine.models.bagel.preprocess import (VAE_RESIZE, VIT_RESIZE, ResizeRule, latent_grid, normalize, patchify,
                                            position_ids, resize, unpatchify, vae_resize, vit_image)

pytestmark = pytest.mark.timeout(120)
RULES = {"vae": VAE_RESIZE, "vit": VIT_RESIZE}
SIDES = st.integers(min_value=1, max_value=8000)


@pytest.mark.parametrize("rule,size,want", [
    ("vae", (640, 480), (688, 512)),     # scaled up to the 512 short side, 682.7 -> 683 -> 688
    ("vae", (2000, 1000), (1024, 512)),  # scaled down to the 1024 long side
    ("vae", (512, 1024), (512, 1024)),   # already fits
    ("vae", (1, 1), (512, 512)),
    # 512 x 10240 is over max_pixels: x0.34453125 -> 176 x 3528 (3528 / 16 = 220.5 rounds half to even:
    # 3520), then over the long side: x(1024 / 3520) -> 51.2 -> 51 -> 48 x 1024
    ("vae", (100, 2000), (48, 1024)),
    ("vit", (688, 512), (686, 518)),     # the VAE-resized image, resized again for the ViT: 49 x 37 patches
    ("vit", (3000, 3000), (980, 980)),
    ("vit", (100, 150), (224, 336)),
])
def test_resize_sizes_follow_upstreams_rule(rule, size, want):
    assert RULES[rule].shape(*size) == want


@settings(max_examples=300, deadline=None)
@given(width=SIDES, height=SIDES, rule=st.sampled_from(sorted(RULES)))
def test_resized_sides_are_multiples_within_bounds_and_stable(width, height, rule):
    r = RULES[rule]
    w, h = r.shape(width, height)
    assert w % r.stride == 0 and h % r.stride == 0 and min(w, h) >= r.stride
    assert max(w, h) <= r.max_size
    if min(w, h) >= r.min_size:
        assert r.shape(w, h) == (w, h)  # a resized image is not resized again
    if rule == "vae":  # every VAE-resized image has a latent grid the default table covers
        grid = latent_grid(h, w)
        assert max(grid.rows, grid.cols) <= 64 and grid.position_ids.shape == (grid.rows * grid.cols,)
    else:
        assert max(w, h) // 14 <= 70


@settings(max_examples=200, deadline=None)
@given(width=SIDES, height=SIDES)
def test_sizes_that_already_fit_are_kept(width, height):
    w, h = (max(512, min(1024, s)) // 16 * 16 for s in (width, height))
    assert VAE_RESIZE.shape(w, h) == (w, h)


def test_pixels_are_pils_bicubic_resize_normalized():
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (300, 410, 3), dtype=np.uint8))
    resized = vae_resize(image)
    assert resized.size == (704, 512)  # 410 * 512 / 300 = 699.7 -> 700 -> 704
    want = np.asarray(image.resize((704, 512), Image.BICUBIC), dtype=np.float32) / np.float32(255)
    want = (want - np.float32(0.5)) / np.float32(0.5)
    assert torch.equal(normalize(resized), torch.from_numpy(want).permute(2, 0, 1))
    # the VAE component's own conversion (u8 / 255 * 2 - 1) is the same normalization, bit for bit
    u8 = torch.arange(256, dtype=torch.uint8).float()
    assert torch.equal(u8 / 255 * 2 - 1, (u8 / 255 - 0.5) / 0.5)


def test_transparent_pixels_become_white_and_same_size_resizes_copy():
    rgba = np.zeros((512, 512, 4), dtype=np.uint8)
    rgba[0, 0] = (10, 20, 30, 255)
    pixels = normalize(vae_resize(Image.fromarray(rgba, "RGBA")))
    assert pixels[:, 0, 0].tolist() == pytest.approx([10 / 127.5 - 1, 20 / 127.5 - 1, 30 / 127.5 - 1])
    assert bool((pixels[:, 1:, 1:] == 1).all())
    image = Image.fromarray(np.full((512, 640, 3), 7, dtype=np.uint8))
    assert np.array_equal(np.asarray(resize(image, VAE_RESIZE)), np.asarray(image))


@pytest.mark.parametrize("patch,shape", [(14, (3, 28, 42)), (2, (16, 6, 4))])
def test_patchify_is_upstreams_layout_and_unpatchify_inverts_it(patch, shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    c, h, w = shape
    tokens = patchify(x, patch)
    grid = x.reshape(c, h // patch, patch, w // patch, patch)
    want = torch.einsum("chpwq->hwpqc", grid).reshape(-1, patch * patch * c)  # upstream's patchify
    assert torch.equal(tokens, want)
    # token r * cols + k is the patch at (r, k), its values (row, col, channel)
    assert torch.equal(tokens[1 * (w // patch) + 1], x[:, patch:2 * patch, patch:2 * patch].permute(1, 2, 0).flatten())
    assert torch.equal(unpatchify(tokens, h // patch, w // patch, patch), x)


def test_vit_input_of_a_vae_resized_image():
    image = vae_resize(Image.fromarray(np.zeros((480, 640, 3), dtype=np.uint8)))
    vit = vit_image(image)
    assert vit.grid == (37, 49) and vit.pixels.shape == (37 * 49, 14 * 14 * 3)
    assert vit.position_ids[:3].tolist() == [0, 1, 2] and vit.position_ids[49].item() == 70
    assert vit.position_ids[-1].item() == 36 * 70 + 48


def test_latent_grid_ids_and_refusals_name_the_field():
    grid = latent_grid(512, 1024)
    assert (grid.rows, grid.cols) == (32, 64) and grid.position_ids[64].item() == 64
    with pytest.raises(InvalidArgument, match="size: 1040x512 makes a 65x32 latent grid"):
        latent_grid(512, 1040)
    with pytest.raises(InvalidArgument, match="image: .*max_latent_size 16"):
        latent_grid(512, 512, max_latent_size=16, field="image")
    with pytest.raises(InvalidArgument, match="size: 520x512 .* multiples of 16"):
        latent_grid(512, 520)
    with pytest.raises(InvalidArgument, match="size"):
        latent_grid(0, 512)
    with pytest.raises(InvalidArgument, match="image"):
        position_ids(3, 71, 70, "image")
    with pytest.raises(InvalidArgument, match="width and height"):
        VAE_RESIZE.shape(0, 10)
    with pytest.raises(InvalidArgument, match="resize rule"):
        ResizeRule(max_size=100, min_size=200, stride=16)
