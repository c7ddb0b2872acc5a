"""The offload API on diffusers' modules as engine/models/sd3 loads them (generic discovery,
no changes to the models): the SD3 DiT's transformer_blocks and the VAE decoder's
up_blocks stream, outputs bitwise equal to resident execution."""
from __future__ import annotations

import pytest
import torch

from engine.offload import OffloadBackend, OffloadConfig
from engine.offload.memory import param_bytes, weight_bytes

diffusers = pytest.importorskip("diffusers")
ON = OffloadConfig(enabled=True)


def _pair(build):
    torch.manual_seed(0)
    resident = build().eval().requires_grad_(False)
    torch.manual_seed(0)
    return resident, build().eval().requires_grad_(False)


def test_sd3_transformer_blocks_stream():
    def build():
        return diffusers.SD3Transformer2DModel(
            sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=3, attention_head_dim=16,
            num_attention_heads=2, caption_projection_dim=32, joint_attention_dim=64, pooled_projection_dim=48,
            pos_embed_max_size=32)

    resident, model = _pair(build)
    g = torch.Generator().manual_seed(1)
    args = dict(hidden_states=torch.randn(2, 4, 8, 8, generator=g),
                encoder_hidden_states=torch.randn(2, 5, 64, generator=g),
                pooled_projections=torch.randn(2, 48, generator=g), timestep=torch.tensor([10.0, 500.0]))
    backend = OffloadBackend.enable(model, ON)
    assert [b.path for b in backend.plan.blocks] == [f"transformer_blocks.{i}" for i in range(3)]
    for _ in range(2):
        assert torch.equal(model(**args).sample, resident(**args).sample)
    bound = 2 * backend.plan.slot_bytes + param_bytes(resident, backend.plan.streamed_names)
    assert weight_bytes(model, backend) <= bound
    backend.disable()


def test_vae_decoder_up_blocks_stream():
    def build():
        return diffusers.AutoencoderKL(block_out_channels=(8, 8, 16, 16), norm_num_groups=4, latent_channels=4,
                                       down_block_types=("DownEncoderBlock2D",) * 4,
                                       up_block_types=("UpDecoderBlock2D",) * 4)

    resident, model = _pair(build)
    latent = torch.randn(1, 4, 4, 4, generator=torch.Generator().manual_seed(2))
    backend = OffloadBackend.enable(model.decoder, ON)  # the decode path only
    assert [b.path for b in backend.plan.blocks] == [f"up_blocks.{i}" for i in range(4)]
    assert torch.equal(model.decode(latent).sample, resident.decode(latent).sample)
    backend.disable()
