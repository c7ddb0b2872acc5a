"""BAGEL's specifics on the shared components, in process: the ViT tower of the encoder
service (its rows are the tower's own, an undecodable image is refused naming the part)
and the vae component's seeded posterior sample (each image its solo sample, batched or
not)."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.bagel.params import BagelParams
from engine.models.bagel.preprocess import vae_resize, vit_image
from runtime.items import OpenNode
from services.bagel import vae_hook
from services.bagel.vit_tower import BagelVitTower, encoder_hook
from services.vae.component import VaeComponent
from tests.e2e.bagel_mesh import png
from tests.fixtures import tiny_bagel
from tests.pipelines.bagel_cases import VAE_RULE, VIT_RULE, image


@pytest.fixture(scope="module")
def checkpoint() -> str:
    return tiny_bagel.checkpoint()


def test_the_vit_tower_gives_the_towers_own_rows_and_refuses_what_is_not_an_image(checkpoint):
    tower = encoder_hook(checkpoint).towers["vision"]("float32", "cpu")
    assert isinstance(tower, BagelVitTower) and encoder_hook("/nonexistent") is None
    pictures = [image(50, 40, 1), image(30, 60, 2)]
    parts = tower.run([tower.prepare("image", png(p), "open.inputs[image]") for p in pictures])
    for part, picture in zip(parts, pictures):
        v = vit_image(vae_resize(picture, VAE_RULE), 14, 70, VIT_RULE)
        torch.testing.assert_close(part.rows, tower.vit(v.pixels, v.position_ids, [len(v.pixels)]))
        assert part.grid == (1, *v.grid)
    with pytest.raises(InvalidArgument, match=r"open.inputs\[image\]\[1\]: not a decodable image"):
        tower.prepare("image", b"GIF89a garbage", "open.inputs[image][1]")


def test_the_vae_draws_each_images_posterior_from_the_requests_seed(checkpoint):
    hook = vae_hook.vae_hook(checkpoint)
    vae = VaeComponent(hook.load(checkpoint), hook.parse_params)
    images = [torch.rand(32, 48, 3, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    params = BagelParams(seed=5)
    payloads = []
    for i, img in enumerate(images):
        key, payload = vae.prepare(OpenNode(f"r{i}", "encode", params={"seed": 5}), {"image": img})
        payloads.append(payload)
    assert key == ("encode", (1, 32, 48, 3), params.posterior_seed)
    batched = vae.run(key, payloads)
    for img, out in zip(images, batched):
        solo = vae.model.encode(img[None], torch.Generator().manual_seed(params.posterior_seed))
        assert torch.equal(out["latent"], solo)
    assert not torch.equal(batched[0]["latent"], vae.model.encode(images[0][None]))  # a sample, not the mode
