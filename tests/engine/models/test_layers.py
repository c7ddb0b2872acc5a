"""Pieces checked against transformers' own modules: the shared-expert MoE block and the
Qwen3-Omni thinker's multimodal rope for text-only positions."""
from __future__ import annotations

import pytest
import torch

from engine.model_config import ModelConfig
from engine.models.moe import SparseMoE
from engine.models.rope import RotaryEmbedding


def _moe_config(**kw) -> ModelConfig:
    base = dict(family="qwen3_moe", vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=1,
                num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=1e4, rms_eps=1e-6,
                tie_word_embeddings=False, max_position=128, qk_norm=True, num_experts=6,
                num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=False,
                shared_expert_intermediate_size=24)
    return ModelConfig(**{**base, **kw})


def test_shared_expert_moe_matches_qwen2_moe_block():
    from transformers import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    torch.manual_seed(0)
    hf_cfg = Qwen2MoeConfig(hidden_size=32, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
                            shared_expert_intermediate_size=24, norm_topk_prob=False)
    hf = Qwen2MoeSparseMoeBlock(hf_cfg).eval()
    for p in hf.parameters():
        torch.nn.init.normal_(p, std=0.2)
    ours = SparseMoE(_moe_config()).eval()
    missing = ours.load_state_dict(hf.state_dict(), strict=True)
    assert not missing.missing_keys
    x = torch.randn(10, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x[None])[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("head_dim,section", [(16, [2, 3, 3]), (128, [24, 20, 20])])
def test_omni_text_rope_with_equal_positions_is_1d_rope(head_dim, section):
    from transformers import Qwen3OmniMoeTextConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeThinkerTextRotaryEmbedding

    rope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section, "interleaved": True}
    hf = Qwen3OmniMoeThinkerTextRotaryEmbedding(Qwen3OmniMoeTextConfig(
        head_dim=head_dim, hidden_size=head_dim * 4, num_attention_heads=4, rope_parameters=rope))
    positions = torch.tensor([0, 1, 2, 7, 100, 4095, 60000])
    x = torch.zeros(1, positions.numel(), head_dim)
    hf_cos, hf_sin = hf(x, positions.view(1, 1, -1).expand(3, 1, -1))  # all three axes equal
    ours = RotaryEmbedding(_moe_config(head_dim=head_dim, rope_theta=1e6, num_heads=4, num_kv_heads=4))
    cos, sin = ours(positions, torch.float32)
    torch.testing.assert_close(cos[:, 0], hf_cos[0], atol=0, rtol=0)
    torch.testing.assert_close(sin[:, 0], hf_sin[0], atol=0, rtol=0)
    # ...and with unequal axes it is not (so the check above can fail).
    mixed = torch.stack([positions, positions // 2, positions // 3]).view(3, 1, -1)
    assert not torch.equal(hf(x, mixed)[0][0], hf_cos[0])


def _hf_rms_norm(x, weight, eps):
    """transformers' Qwen3RMSNorm.forward, verbatim."""
    input_dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(input_dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 256), (37, 256), (2048, 256), (33, 4, 64)])
def test_rms_norm_is_hf_bit_for_bit(shape, dtype):
    """The torch path is HF's bit for bit; the CPU kernel (one pass per row, the mean summed
    in another order) within a few fp32 ulps of it, and exact up to that rounding in bf16."""
    from engine.attention import cpu_kernels
    from engine.models.layers import RMSNorm

    gen = torch.Generator().manual_seed(0)
    norm = RMSNorm(shape[-1], 1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(shape[-1], generator=gen))
    x = (torch.randn(shape, generator=gen) * 3).to(dtype)
    with torch.inference_mode():
        hf = _hf_rms_norm(x, norm.weight, 1e-6)
        assert torch.equal(norm.torch_forward(x), hf)
        assert cpu_kernels.rms_norm() is not None  # built here (scripts/setup.sh): the default CPU path
        out = norm(x)
    assert out.dtype == dtype and out.shape == x.shape
    ulp = 1e-6 if dtype == torch.float32 else 2 ** -7  # bf16: the normalised value may round the other way
    torch.testing.assert_close(out.float(), hf.float(), rtol=ulp * 4, atol=ulp * 4)


def test_rotate_is_apply_rope_bit_for_bit():
    from engine.models.rope import apply_rope, rotate

    rotary = RotaryEmbedding(_moe_config(head_dim=64, rope_theta=1e4, num_heads=4, num_kv_heads=2))
    positions = torch.tensor([0, 1, 5, 17, 255, 1000])
    x = torch.randn(positions.numel(), 4, 64, generator=torch.Generator().manual_seed(0))
    cos, sin = rotary(positions, torch.float32)
    assert torch.equal(rotate(x, *rotary.rotation(positions, torch.float32)), apply_rope(x, cos, sin))


def test_gated_mlp_in_place_path_is_the_plain_one():
    from engine.models.layers import GatedMLP

    torch.manual_seed(0)
    mlp = GatedMLP(32, 64)
    x = torch.randn(7, 32)
    with torch.no_grad():
        plain = mlp.down_proj(torch.nn.functional.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
    with torch.inference_mode():
        assert torch.equal(mlp(x), plain)
