"""BAGEL's autoencoder: an ae.safetensors in the FLUX key layout, loaded by our converter
into the project's VAE, equals diffusers' own single-file loading of the same file
(`AutoencoderKL.from_single_file` with the FLUX config, offline from a local config
folder): encode (a seeded posterior sample, and the mean) and decode, on two configs with
every tensor random. Bad files are refused naming the tensor."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from core.errors import InvalidArgument
from engine.models.bagel.flux_vae import (TINY_AE, FluxAeConfig, infer_config, load_flux_vae, random_ae_state,
                                          tiny_ae_state)

pytestmark = pytest.mark.timeout(180)

# FLUX.1's published diffusers VAE config (its vae/config.json)
FLUX_VAE_CONFIG = {
    "_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "force_upcast": True, "in_channels": 3, "latent_channels": 16,
    "layers_per_block": 2, "mid_block_add_attention": True, "norm_num_groups": 32, "out_channels": 3,
    "sample_size": 1024, "scaling_factor": 0.3611, "shift_factor": 0.1159,
    "up_block_types": ["UpDecoderBlock2D"] * 4, "use_post_quant_conv": False, "use_quant_conv": False,
}
CONFIGS = {
    "tiny": (TINY_AE, (40, 56)),  # BAGEL's geometry: 16 latent channels, 8x down
    "wide": (FluxAeConfig(ch=32, ch_mult=(1, 2, 2), num_res_blocks=2, z_channels=4, scale_factor=0.5,
                          shift_factor=-0.2), (28, 20)),
}


def flux_config_for(config: FluxAeConfig) -> dict:
    """The published FLUX config with this autoencoder's channels, levels and factors."""
    levels = len(config.ch_mult)
    return {**FLUX_VAE_CONFIG, "block_out_channels": [config.ch * m for m in config.ch_mult],
            "down_block_types": ["DownEncoderBlock2D"] * levels, "up_block_types": ["UpDecoderBlock2D"] * levels,
            "layers_per_block": config.num_res_blocks, "latent_channels": config.z_channels,
            "scaling_factor": config.scale_factor, "shift_factor": config.shift_factor}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def loaded(request, tmp_path_factory):
    """(case, ours, diffusers' from_single_file) of one random FLUX-layout file."""
    from diffusers import AutoencoderKL

    config, _ = CONFIGS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    save_file(random_ae_state(config, torch.Generator().manual_seed(11)), str(root / "ae.safetensors"))
    (root / "flux-vae").mkdir()
    (root / "flux-vae" / "config.json").write_text(json.dumps(flux_config_for(config)))
    ours = load_flux_vae(root / "ae.safetensors", config=config)
    ref = AutoencoderKL.from_single_file(str(root / "ae.safetensors"), config=str(root / "flux-vae"),
                                         local_files_only=True, torch_dtype=torch.float32).eval()
    return request.param, ours, ref


def test_defaults_are_flux_and_the_tiny_keeps_bagels_geometry():
    assert FluxAeConfig().diffusers_config() == {k: v for k, v in FLUX_VAE_CONFIG.items() if k != "_class_name"}
    state, params = tiny_ae_state(torch.Generator().manual_seed(0))
    assert params["z_channels"] == 16 and params["downsample"] == 8
    assert (params["scale_factor"], params["shift_factor"]) == (0.3611, 0.1159)
    assert infer_config(state) == FluxAeConfig.from_dict(params) == TINY_AE
    assert all(k.startswith(("encoder.", "decoder.")) for k in state) and "encoder.mid.attn_1.q.weight" in state


def test_encode_sample_and_mean_equal_diffusers_single_file(loaded):
    case, ours, ref = loaded
    config, (height, width) = CONFIGS[case]
    images = torch.rand(2, height, width, 3, generator=torch.Generator().manual_seed(1))
    sample = ours.encode(images, generator=torch.Generator().manual_seed(5))
    mean = ours.encode(images)
    with torch.no_grad():
        posterior = ref.encode(images.permute(0, 3, 1, 2) * 2 - 1).latent_dist
        want_sample = posterior.sample(generator=torch.Generator().manual_seed(5))
    scale, shift = config.scale_factor, config.shift_factor
    assert sample.shape == (2, config.z_channels, height // config.downsample, width // config.downsample)
    assert torch.allclose(sample, (want_sample - shift) * scale, atol=1e-5, rtol=0)
    assert torch.allclose(mean, (posterior.mean - shift) * scale, atol=1e-5, rtol=0)
    assert not torch.allclose(sample, mean, atol=1e-3)  # the sample is not the mean


def test_decode_equals_diffusers_single_file(loaded):
    case, ours, ref = loaded
    config, (height, width) = CONFIGS[case]
    f = config.downsample
    latents = torch.randn(2, config.z_channels, height // f, width // f, generator=torch.Generator().manual_seed(2))
    images = ours.decode(latents)
    with torch.no_grad():
        want = ref.decode(latents / config.scale_factor + config.shift_factor).sample
    assert images.shape == (2, height, width, 3)
    assert torch.allclose(images, (want * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 3, 1), atol=1e-5, rtol=0)
    assert 0.05 < float(images.std())  # not a flat image


def test_bad_files_name_the_tensor(tmp_path):
    state = random_ae_state(TINY_AE, torch.Generator().manual_seed(0))

    def load(tensors):
        save_file(tensors, str(tmp_path / "ae.safetensors"))
        return load_flux_vae(tmp_path / "ae.safetensors", config=TINY_AE)

    with pytest.raises(InvalidArgument, match="decoder.up_blocks.0.resnets.1.conv2.weight"):
        load({k: v for k, v in state.items() if k != "decoder.up.3.block.1.conv2.weight"})
    with pytest.raises(InvalidArgument, match="first_stage_model.encoder.conv_in.weight"):
        load({**state, "first_stage_model.encoder.conv_in.weight": torch.zeros(1)})
    with pytest.raises(InvalidArgument, match="encoder.mid.attn_1.q.weight"):
        load({**state, "encoder.mid.attn_1.q.weight": torch.zeros(64, 32, 1, 1)})
    with pytest.raises(InvalidArgument, match="ae file"):
        load_flux_vae(tmp_path / "missing.safetensors")
    with pytest.raises(InvalidArgument, match="ch_mult"):
        FluxAeConfig(ch=48)
