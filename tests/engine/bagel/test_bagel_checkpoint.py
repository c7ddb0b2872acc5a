"""BAGEL checkpoints: `starmesh make-tiny bagel` writes the upstream layout and the
backbone's loader reads it back unchanged (fp32 and bf16); bad checkpoints are refused
naming the key, field or file; the loader defaults can be overridden."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from cluster.registry import build_tiny, tiny_kinds
from core.errors import InvalidArgument
from engine.models.bagel import SPECIAL_TOKENS
from engine.models.bagel.backbone import checkpoint_name
from engine.models.bagel.loader import BACKBONE_PREFIXES, VISION_PREFIXES, load_backbone
from engine.models.bagel.tiny import TOKEN_IDS


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny("bagel", tmp_path_factory.mktemp("bagel") / "tiny", seed=0)


@pytest.fixture
def copy(tiny, tmp_path):
    """A writable copy of the tiny checkpoint."""
    return shutil.copytree(tiny, tmp_path / "ckpt")


def test_make_tiny_writes_the_upstream_layout(tiny):
    assert "bagel" in tiny_kinds()
    assert {"llm_config.json", "vit_config.json", "ema.safetensors", "ae.safetensors", "tokenizer.json",
            "tokenizer_config.json", "vocab.json", "merges.txt"} <= {p.name for p in tiny.iterdir()}
    llm = json.loads((tiny / "llm_config.json").read_text())
    assert llm["model_type"] == "qwen2" and llm["eos_token_id"] == TOKEN_IDS["<|im_end|>"]
    vit = json.loads((tiny / "vit_config.json").read_text())
    assert vit["model_type"] == "siglip_vision_model" and vit["image_size"] // vit["patch_size"] == 70
    with safe_open(str(tiny / "ema.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert keys and all(k.startswith(BACKBONE_PREFIXES + VISION_PREFIXES) for k in keys)
    for prefix in BACKBONE_PREFIXES + VISION_PREFIXES:
        assert any(k.startswith(prefix) for k in keys), prefix
    with safe_open(str(tiny / "ae.safetensors"), "pt") as f:
        ae_keys = list(f.keys())
    assert any(k.startswith("encoder.down.") for k in ae_keys) and any(k.startswith("decoder.up.") for k in ae_keys)


def test_the_tiny_vision_keys_are_the_vision_towers_parameters(tiny):
    from engine.models.bagel.config import read_bagel_config
    from engine.models.bagel.vit import BagelVit
    from engine.models.bagel.vit_config import VitConfig

    config = read_bagel_config(tiny)
    vit = VitConfig.from_siglip(config.vit, config.llm.hidden_size, **config.defaults.vit_options())
    with torch.device("meta"):
        expected = {k: tuple(t.shape) for k, t in BagelVit(vit).state_dict().items()}
    ema = load_file(str(tiny / "ema.safetensors"))
    assert {k: tuple(t.shape) for k, t in ema.items() if k.startswith(VISION_PREFIXES)} == expected


def test_the_tiny_tokenizer_has_bagels_special_tokens(tiny):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    assert tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == list(TOKEN_IDS.values())
    ids = tokenizer.encode("<|im_start|>a cat<|im_end|>", add_special_tokens=False)
    assert ids == [TOKEN_IDS["<|im_start|>"], *b"a cat", TOKEN_IDS["<|im_end|>"]]
    assert tokenizer.eos_token_id == TOKEN_IDS["<|im_end|>"]
    assert set(json.loads((tiny / "vocab.json").read_text()).values()) == set(range(256)) | set(TOKEN_IDS.values())


def _assert_loaded_unchanged(model, ema: dict) -> None:
    params = dict(model.named_parameters())
    assert {checkpoint_name(n) for n in params} == {k for k in ema if k.startswith(BACKBONE_PREFIXES)}
    for name, param in params.items():
        source = ema[checkpoint_name(name)]
        assert param.dtype == source.dtype and torch.equal(param, source), name


def test_the_loader_reads_the_tiny_back_unchanged(tiny):
    model = load_backbone(tiny)
    _assert_loaded_unchanged(model, load_file(str(tiny / "ema.safetensors")))
    assert model.tokenizer_path == tiny and model.config.eos_token_ids == (TOKEN_IDS["<|im_end|>"],)
    # every tensor random, norms' affine weights included (none left at the init's ones or zeros)
    for name, param in model.named_parameters():
        assert param.std() > 0.01 and not torch.equal(param, torch.ones_like(param)), name


def test_the_seed_decides_the_weights(tiny, tmp_path):
    again, other = build_tiny("bagel", tmp_path / "again", seed=0), build_tiny("bagel", tmp_path / "other", seed=1)
    for name in ("ema.safetensors", "ae.safetensors"):
        assert (again / name).read_bytes() == (tiny / name).read_bytes()
        assert (other / name).read_bytes() != (tiny / name).read_bytes()


def test_bf16_weights_load_unchanged(copy):
    ema = {k: t.to(torch.bfloat16) for k, t in load_file(str(copy / "ema.safetensors")).items()}
    save_file(ema, str(copy / "ema.safetensors"))
    llm = json.loads((copy / "llm_config.json").read_text())
    (copy / "llm_config.json").write_text(json.dumps({**llm, "torch_dtype": "bfloat16"}))
    model = load_backbone(copy)
    assert model.config.dtype == "bfloat16"
    _assert_loaded_unchanged(model, ema)


def _rewrite_ema(path, edit) -> None:
    ema = load_file(str(path / "ema.safetensors"))
    edit(ema)
    save_file(ema, str(path / "ema.safetensors"))


def test_a_missing_backbone_tensor_is_refused_by_name(copy):
    _rewrite_ema(copy, lambda ema: ema.pop("language_model.model.layers.1.self_attn.k_norm_moe_gen.weight"))
    with pytest.raises(InvalidArgument, match=r"missing tensor 'language_model\.model\.layers\.1\.self_attn\."
                                              r"k_norm_moe_gen\.weight'"):
        load_backbone(copy)


@pytest.mark.parametrize("key", ["language_model.model.layers.0.self_attn.o_proj.bias", "time_embedder.extra",
                                 "unknown_head.weight"])
def test_an_unexpected_tensor_is_refused_by_name(copy, key):
    _rewrite_ema(copy, lambda ema: ema.update({key: torch.zeros(3)}))
    with pytest.raises(InvalidArgument, match=f"unexpected tensor '{key}'"):
        load_backbone(copy)


def test_a_tensor_of_the_wrong_shape_is_refused_by_name(copy):
    _rewrite_ema(copy, lambda ema: ema.update({"vae2llm.weight": torch.zeros(64, 32)}))
    with pytest.raises(InvalidArgument, match=r"tensor 'vae2llm\.weight' .* shape \(64, 32\)"):
        load_backbone(copy)


def test_missing_files_are_refused_by_name(copy, tmp_path):
    (copy / "ema.safetensors").unlink()
    with pytest.raises(InvalidArgument, match="no ema.safetensors"):
        load_backbone(copy)
    (copy / "vit_config.json").unlink()
    with pytest.raises(InvalidArgument, match="no vit_config.json"):
        load_backbone(copy)
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_backbone(tmp_path / "nowhere")


def test_loader_defaults_are_overridden_by_file_then_by_the_caller(copy):
    """A checkpoint of another latent grid: bagel_defaults.json says so; an override wins
    over the file; an unknown or bad field is refused, named."""
    _rewrite_ema(copy, lambda ema: ema.update({"latent_pos_embed.pos_embed": torch.randn(32 * 32, 64)}))
    with pytest.raises(InvalidArgument, match=r"latent_pos_embed\.pos_embed"):
        load_backbone(copy)
    (copy / "bagel_defaults.json").write_text(json.dumps({"max_latent_size": 32}))
    model = load_backbone(copy)
    assert model.bagel.defaults.max_latent_size == 32 and model.latent_io.latent_pos_embed.pos_embed.shape[0] == 1024
    with pytest.raises(InvalidArgument, match=r"latent_pos_embed\.pos_embed"):
        load_backbone(copy, overrides={"max_latent_size": 64})
    (copy / "bagel_defaults.json").write_text(json.dumps({"max_latent_size": 32, "latent_size": 8}))
    with pytest.raises(InvalidArgument, match="unknown BAGEL default 'latent_size'"):
        load_backbone(copy)
    (copy / "bagel_defaults.json").write_text(json.dumps({"max_latent_size": 32}))
    with pytest.raises(InvalidArgument, match="BagelDefaults.latent_patch_size"):
        load_backbone(copy, overrides={"latent_patch_size": 0})


@pytest.mark.parametrize("field,value,message", [
    ("model_type", "llama", "model_type 'llama'"),
    ("layer_module", "Qwen2DecoderLayer", "layer_module 'Qwen2DecoderLayer'"),
    ("hidden_act", "gelu", "hidden_act 'gelu'"),
    ("num_hidden_layers", None, "num_hidden_layers"),
])
def test_a_bad_llm_config_is_refused_naming_the_field(copy, field, value, message):
    llm = json.loads((copy / "llm_config.json").read_text())
    llm[field] = value
    if value is None:
        del llm[field]
    (copy / "llm_config.json").write_text(json.dumps(llm))
    with pytest.raises(InvalidArgument, match=message):
        load_backbone(copy)
