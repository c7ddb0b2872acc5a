"""SD3's model code on its own (no components): the text encoders and their join give
diffusers' encode_prompt, a batched DiT call gives each sample's own forward, the
initial latent is diffusers' draw, and the VAE decode is the pipeline's image."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.sd3.dit import DenoiseInput, Sd3Dit
from engine.models.sd3.text_encoders import Sd3TextEncoders, join_conditioning
from engine.models.sd3.vae import Sd3Vae
from services.vae.component import to_rgb8
from tests.fixtures import tiny_sd3

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pipe():
    return tiny_sd3.reference_pipeline()


def test_encoders_and_join_equal_encode_prompt(pipe):
    encoders = Sd3TextEncoders.load(tiny_sd3.checkpoint())
    assert encoders.names == ("clip_l", "clip_g", "t5") and encoders.token_len("t5", 16) == 16
    texts = [tiny_sd3.PROMPT, tiny_sd3.NEGATIVE]
    with tiny_sd3.one_thread():
        clip_l = encoders.encode("clip_l", texts, encoders.token_len("clip_l", 16))
        clip_g = encoders.encode("clip_g", texts, encoders.token_len("clip_g", 16))
        t5, no_pooled = encoders.encode("t5", texts, 16)
        embeds, pooled = join_conditioning(clip_l, clip_g, t5)
        ref = pipe.encode_prompt(tiny_sd3.PROMPT, tiny_sd3.PROMPT, tiny_sd3.PROMPT, negative_prompt=tiny_sd3.NEGATIVE,
                                 negative_prompt_2=tiny_sd3.NEGATIVE, negative_prompt_3=tiny_sd3.NEGATIVE,
                                 max_sequence_length=16)
    assert no_pooled is None and embeds.shape[:2] == (2, 77 + 16)
    # diffusers encodes the prompt and the negative one call each: equal up to batching
    assert torch.allclose(embeds, torch.cat([ref[0], ref[1]]), atol=1e-5)
    assert torch.allclose(pooled, torch.cat([ref[2], ref[3]]), atol=1e-5)


def test_unknown_encoder_and_too_wide_clip_name_themselves():
    with pytest.raises(InvalidArgument, match="clip_x"):
        Sd3TextEncoders.load(tiny_sd3.checkpoint(), names=["clip_x"])
    clip = (torch.zeros(2, 77, 40), torch.zeros(2, 8))
    with pytest.raises(InvalidArgument, match="wider than T5"):
        join_conditioning(clip, clip, torch.zeros(2, 4, 64))


def test_a_batched_call_gives_each_sample_its_own_forward(pipe):
    dit = Sd3Dit.load(tiny_sd3.checkpoint())
    assert dit.embed_dims == (64, 48) and dit.transformer.offload_backend is None
    g = torch.Generator().manual_seed(3)
    samples = [DenoiseInput(torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 5, 64, generator=g),
                            torch.randn(1, 48, generator=g), torch.tensor(t)) for t in (100.0, 900.0)]
    with tiny_sd3.one_thread():
        both = dit.denoise(samples)
        alone = [dit.denoise([s])[0] for s in samples]
        ref = pipe.transformer(hidden_states=samples[0].latent, timestep=samples[0].timestep.view(1),
                               encoder_hidden_states=samples[0].embeds, pooled_projections=samples[0].pooled,
                               return_dict=False)[0]
        dit.pad_forward()  # a zero input of one token runs
    assert [v.shape for v in both] == [(1, 4, 8, 8)] * 2
    assert all(torch.allclose(b, a, atol=1e-5) for b, a in zip(both, alone))
    assert torch.equal(alone[0], ref)


def test_initial_latent_is_diffusers_draw(pipe):
    from diffusers.utils.torch_utils import randn_tensor

    dit = Sd3Dit.load(tiny_sd3.checkpoint())
    want = randn_tensor((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(7), dtype=torch.float32)
    assert torch.equal(dit.initial_latent((1, 4, 8, 8), 7), want)


def test_vae_decode_is_the_pipeline_image(pipe):
    vae = Sd3Vae.load(tiny_sd3.checkpoint())
    latent = torch.randn(2, vae.latent_channels, 8, 8, generator=torch.Generator().manual_seed(5))
    with tiny_sd3.one_thread():
        images = vae.decode(latent)
        decoded = pipe.vae.decode(latent / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor,
                                  return_dict=False)[0]
        ref = pipe.image_processor.postprocess(decoded, output_type="pt").permute(0, 2, 3, 1)
    assert images.shape == (2, 64, 64, 3) and torch.equal(images, ref)
    rgb = to_rgb8(images)
    assert rgb.dtype == torch.uint8 and torch.equal(rgb, (ref * 255).round().to(torch.uint8))


def test_a_vae_without_shift_factor_is_refused():
    class Config:
        shift_factor, scaling_factor, latent_channels = None, 1.5, 4

    class Vae:
        config = Config()

    with pytest.raises(InvalidArgument, match="shift_factor"):
        Sd3Vae(Vae())
