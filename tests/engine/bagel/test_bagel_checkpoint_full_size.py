"""The full-size BAGEL-7B-MoT backbone on the meta device: every parameter's ema key and
shape, without the weights. fixtures/BAGEL-7B-MoT holds the release's llm_config.json
(its Qwen2.5-7B decoder) and vit_config.json; the expected keys are written out below
from upstream's module structure (Qwen2MoTDecoderLayer with PackedAttentionMoT, the
Bagel wrapper's generation modules)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.bagel.config import read_bagel_config
from engine.models.bagel.loader import build_backbone, check_keys, expected_keys

FIXTURE = Path(__file__).parent / "fixtures" / "BAGEL-7B-MoT"
HIDDEN, INTERMEDIATE, VOCAB, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 3584, 18944, 152064, 28, 28, 4, 128
LATENT_DIM = 2 * 2 * 16  # 2x2 patches of 16 latent channels
LATENT_GRID = 64


def upstream_keys() -> dict[str, tuple[int, ...]]:
    keys = {"language_model.model.embed_tokens.weight": (VOCAB, HIDDEN),
            "language_model.lm_head.weight": (VOCAB, HIDDEN),
            "language_model.model.norm.weight": (HIDDEN,), "language_model.model.norm_moe_gen.weight": (HIDDEN,),
            "vae2llm.weight": (HIDDEN, LATENT_DIM), "vae2llm.bias": (HIDDEN,),
            "llm2vae.weight": (LATENT_DIM, HIDDEN), "llm2vae.bias": (LATENT_DIM,),
            "time_embedder.mlp.0.weight": (HIDDEN, 256), "time_embedder.mlp.0.bias": (HIDDEN,),
            "time_embedder.mlp.2.weight": (HIDDEN, HIDDEN), "time_embedder.mlp.2.bias": (HIDDEN,),
            "latent_pos_embed.pos_embed": (LATENT_GRID * LATENT_GRID, HIDDEN)}
    kv = KV_HEADS * HEAD_DIM
    for layer in range(LAYERS):
        p = f"language_model.model.layers.{layer}."
        for s in ("", "_moe_gen"):
            keys.update({
                f"{p}self_attn.q_proj{s}.weight": (HIDDEN, HIDDEN), f"{p}self_attn.q_proj{s}.bias": (HIDDEN,),
                f"{p}self_attn.k_proj{s}.weight": (kv, HIDDEN), f"{p}self_attn.k_proj{s}.bias": (kv,),
                f"{p}self_attn.v_proj{s}.weight": (kv, HIDDEN), f"{p}self_attn.v_proj{s}.bias": (kv,),
                f"{p}self_attn.o_proj{s}.weight": (HIDDEN, HIDDEN),
                f"{p}self_attn.q_norm{s}.weight": (HEAD_DIM,), f"{p}self_attn.k_norm{s}.weight": (HEAD_DIM,),
                f"{p}mlp{s}.gate_proj.weight": (INTERMEDIATE, HIDDEN),
                f"{p}mlp{s}.up_proj.weight": (INTERMEDIATE, HIDDEN),
                f"{p}mlp{s}.down_proj.weight": (HIDDEN, INTERMEDIATE),
                f"{p}input_layernorm{s}.weight": (HIDDEN,), f"{p}post_attention_layernorm{s}.weight": (HIDDEN,)})
    return keys


@pytest.fixture(scope="module")
def meta_model():
    return build_backbone(read_bagel_config(FIXTURE), "meta")


def test_the_release_config_reads_with_upstreams_loader_defaults(meta_model):
    config = meta_model.bagel
    llm = config.llm
    assert (llm.family, llm.hidden_size, llm.num_layers, llm.num_heads, llm.num_kv_heads, llm.head_dim) == \
        ("qwen3", HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM)
    assert llm.qk_norm and llm.attention_bias and not llm.tie_word_embeddings
    assert (llm.rope_theta, llm.rms_eps, llm.dtype, llm.eos_token_ids) == (1e6, 1e-6, "bfloat16", (151645,))
    d = config.defaults
    assert (d.vit_max_num_patch_per_side, d.max_latent_size, d.latent_patch_size, d.connector_act,
            d.vit_drop_last_layer, d.vit_rope) == (70, 64, 2, "gelu_pytorch_tanh", True, False)
    assert config.vit["num_hidden_layers"] == 27 and config.vit["hidden_size"] == 1152


def test_every_ema_key_and_shape_of_the_full_size_backbone(meta_model):
    assert all(p.is_meta for p in meta_model.parameters())
    assert next(meta_model.parameters()).dtype == torch.bfloat16
    assert expected_keys(meta_model) == upstream_keys()
    total = sum(p.numel() for p in meta_model.parameters())
    assert 14.0e9 < total < 14.3e9, total  # two 7B experts sharing the embeddings, lm_head and nothing else


def test_the_key_check_of_a_full_size_header(meta_model):
    """The whole ema header (the vision side's keys included) passes; one key less or one
    stray key is refused, named."""
    from engine.models.bagel.vit import BagelVit
    from engine.models.bagel.vit_config import VitConfig

    with torch.device("meta"):
        vit = VitConfig.from_siglip(meta_model.bagel.vit, HIDDEN, **meta_model.bagel.defaults.vit_options())
        vision = BagelVit(vit).state_dict()
    assert vit.num_layers == 26 and vit.max_num_patch_per_side == 70
    expected = expected_keys(meta_model)
    header = set(expected) | set(vision)
    check_keys(expected, header, "ema.safetensors")
    with pytest.raises(InvalidArgument, match=r"missing tensor 'language_model\.model\.layers\.27\.mlp_moe_gen"):
        check_keys(expected, header - {"language_model.model.layers.27.mlp_moe_gen.up_proj.weight"}, "ema")
    with pytest.raises(InvalidArgument, match="unexpected tensor 'language_model.model.layers.28.mlp.up_proj.weight'"):
        check_keys(expected, header | {"language_model.model.layers.28.mlp.up_proj.weight"}, "ema")
