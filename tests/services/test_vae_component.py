"""The shared VAE component on the tiny SD3 checkpoint (through SD3's vae hook): encode is
diffusers' AutoencoderKL.encode (the latent distribution's mode, scaled by the
checkpoint's factors), uint8 and float images encode alike, encodes of one size batch,
decode takes the latent back to an image, and a bad image names its input."""
from __future__ import annotations

import pytest
import torch

from cluster.registry import build_component
from core.errors import InvalidArgument
from runtime.items import NodeError, NodeOutput, OpenNode
from tests.fixtures import tiny_sd3

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def vae():
    with tiny_sd3.one_thread():
        comp = build_component("vae", checkpoint=tiny_sd3.checkpoint())
        yield comp
    comp.close()


def run(comp, runs: list[tuple[str, str, dict]]) -> dict[str, dict]:
    """Opens every (request id, node, inputs), steps until done -> outputs by request id."""
    for rid, node, inputs in runs:
        comp.open(OpenNode(rid, node, params=dict(tiny_sd3.BASE)), inputs)
    events = []
    while comp.has_work():
        events += comp.step()
    assert not any(isinstance(e, NodeError) for e in events), events
    return {e.request_id: e.tensors for e in events if isinstance(e, NodeOutput)}


def images(n: int, height: int = 64, width: int = 64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    return [torch.randint(0, 256, (height, width, 3), generator=g, dtype=torch.uint8) for _ in range(n)]


def reference_latent(image: torch.Tensor) -> torch.Tensor:
    """diffusers: the image in [-1, 1] [1, 3, H, W], encoded, its mode, (z - shift) * scaling."""
    ref = tiny_sd3.reference_pipeline().vae
    pixels = (image.float() / 255).permute(2, 0, 1).unsqueeze(0) * 2 - 1
    with torch.no_grad(), tiny_sd3.one_thread():
        z = ref.encode(pixels).latent_dist.mode()
    return (z - ref.config.shift_factor) * ref.config.scaling_factor


def test_encode_is_diffusers_autoencoder_encode(vae):
    image = images(1)[0]
    with tiny_sd3.one_thread():
        out = run(vae, [("u8", "encode", {"image": image}), ("f", "encode", {"image": image.float() / 255})])
    assert out["u8"]["latent"].shape == (1, 4, 8, 8) and out["u8"]["latent"].dtype == torch.float32
    assert torch.allclose(out["u8"]["latent"], reference_latent(image), atol=1e-5)
    assert torch.equal(out["u8"]["latent"], out["f"]["latent"])


def test_encodes_of_one_size_batch_and_decode_takes_the_latent_back(vae):
    sizes = []
    hook = vae.model.vae.encoder.register_forward_hook(lambda mod, args, out: sizes.append(args[0].shape[0]))
    pair = images(2)
    try:
        with tiny_sd3.one_thread():
            out = run(vae, [("a", "encode", {"image": pair[0]}), ("b", "encode", {"image": pair[1]}),
                            ("c", "encode", {"image": images(1, 32, 64)[0]})])
    finally:
        hook.remove()
    assert sorted(sizes) == [1, 2]  # a and b in one call; c (another size) alone
    assert torch.allclose(out["b"]["latent"], reference_latent(pair[1]), atol=1e-5)
    assert out["c"]["latent"].shape == (1, 4, 4, 8)
    with tiny_sd3.one_thread():
        back = run(vae, [("d", "decode", {"latent": out["c"]["latent"]})])["d"]
    assert back["image"].shape == (32, 64, 3) and back["image"].dtype == torch.uint8
    assert back["image_float"].shape == (32, 64, 3)


@pytest.mark.parametrize("image, match", [
    (torch.zeros(64, 64, dtype=torch.uint8), "RGB uint8"),
    (torch.zeros(64, 64, 3, dtype=torch.int32), "RGB uint8"),
    (torch.zeros(60, 64, 3, dtype=torch.uint8), "multiples of 8"),
    (torch.full((64, 64, 3), 1.5), r"in \[0, 1\]"),
])
def test_a_bad_image_names_its_input(vae, image, match):
    with pytest.raises(InvalidArgument, match=rf"open.inputs\[image\].*{match}"):
        vae.open(OpenNode("bad", "encode", params=dict(tiny_sd3.BASE)), {"image": image})
    with pytest.raises(InvalidArgument, match="needs 'image'"):
        vae.open(OpenNode("bad", "encode", params=dict(tiny_sd3.BASE)), {})
    assert not vae.has_work()
