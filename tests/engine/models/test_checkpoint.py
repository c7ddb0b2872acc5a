"""Loading: sharded and tied checkpoints, dtypes, tokenizer path, and clear errors."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.models.loader import load_model, read_model_config, tokenizer_path
from engine.checkpoints.tiny_text import make_tiny
from tests.engine.models.cases import TEXT_PARTS, TINY_MODELS, random_prompt
from tests.engine.models.paged import PagedDriver, greedy
from core.errors import InvalidArgument


def _logits(model, prompt):
    return PagedDriver(model).step([(0, prompt)])[0][-1]


@pytest.fixture(scope="module")
def qwen3_dir(tiny_checkpoints):
    return tiny_checkpoints("qwen3")[1]


def test_sharded_checkpoint_loads_like_the_single_file(tmp_path, qwen3_dir):
    sharded = make_tiny("qwen3", tmp_path / "sharded", sharded=True)
    assert len(list(sharded.glob("*.safetensors"))) > 1
    assert (sharded / "model.safetensors.index.json").is_file()
    prompt = random_prompt(7)
    torch.testing.assert_close(_logits(load_model(sharded), prompt), _logits(load_model(qwen3_dir), prompt),
                               atol=0, rtol=0)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe", "llama", "qwen3_omni_moe"])
def test_tied_embeddings_load(tmp_path, family):
    path = make_tiny(TINY_MODELS.get(family, family), tmp_path / family, tie_word_embeddings=True, num_hidden_layers=1)
    model = load_model(path, text_part=TEXT_PARTS.get(family, ""))
    assert model.config.tie_word_embeddings and model.lm_head is None
    logits = _logits(model, random_prompt(5))
    assert logits.shape == (256,) and torch.isfinite(logits).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_loads_and_stays_close(qwen3_dir, dtype):
    ref = load_model(qwen3_dir)
    half = load_model(qwen3_dir, dtype=dtype)
    assert half.config.dtype == dtype
    assert all(p.dtype == getattr(torch, dtype) for p in half.parameters())
    prompt = random_prompt(9)
    logits = _logits(half, prompt)
    assert logits.dtype == torch.float32
    assert (logits - _logits(ref, prompt)).abs().max() < 0.1
    ids, _ = greedy(PagedDriver(half), prompt, 4)
    assert len(ids) == 4


def test_checkpoint_dtype_is_the_default(tmp_path, qwen3_dir):
    path = tmp_path / "bf16"
    shutil.copytree(qwen3_dir, path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["dtype"] = "bfloat16"
    (path / "config.json").write_text(json.dumps(cfg))
    assert load_model(path).config.torch_dtype == torch.bfloat16
    assert load_model(path, dtype="float32").config.torch_dtype == torch.float32


def test_stacked_expert_tensors_load_too(tmp_path, tiny_checkpoints):
    src = tiny_checkpoints("qwen3_moe")[1]
    path = tmp_path / "stacked"
    shutil.copytree(src, path)
    tensors = load_file(path / "model.safetensors")
    for layer in range(2):
        base = f"model.layers.{layer}.mlp.experts"
        names = sorted({k.split(".")[5] for k in tensors if k.startswith(base + ".")}, key=int)
        gate_up = [torch.cat([tensors.pop(f"{base}.{e}.gate_proj.weight"), tensors.pop(f"{base}.{e}.up_proj.weight")])
                   for e in names]
        tensors[f"{base}.gate_up_proj"] = torch.stack(gate_up)
        tensors[f"{base}.down_proj"] = torch.stack([tensors.pop(f"{base}.{e}.down_proj.weight") for e in names])
    save_file(tensors, path / "model.safetensors")
    prompt = random_prompt(6)
    torch.testing.assert_close(_logits(load_model(path), prompt), _logits(load_model(src), prompt), atol=0, rtol=0)


def test_tokenizer_path_and_eos_ids(tmp_path):
    path = make_tiny("qwen3", tmp_path / "tok", with_tokenizer=True, eos_token_id=7, num_hidden_layers=1)
    assert tokenizer_path(path) == path
    assert load_model(path).tokenizer_path == path
    assert read_model_config(path).eos_token_ids == (7,)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    assert tok("hi!")["input_ids"] == [104, 105, 33]


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def test_bad_checkpoints_give_clear_errors(tmp_path, qwen3_dir):
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgument, match="no config.json"):
        load_model(tmp_path / "empty")

    no_weights = _copy(qwen3_dir, tmp_path / "no_weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(InvalidArgument, match="neither model.safetensors nor"):
        load_model(no_weights)

    bad_json = _copy(qwen3_dir, tmp_path / "bad_json")
    (bad_json / "config.json").write_text("{not json")
    with pytest.raises(InvalidArgument, match="config.json: not readable JSON"):
        load_model(bad_json)

    for name, change, message in [
        ("gpt2", {"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
        ("yarn", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}}, "rope_type 'yarn'"),
        ("gelu", {"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ("heads", {"num_key_value_heads": 3}, "multiple of num_kv_heads"),
        ("no_vocab", {"vocab_size": None}, "malformed field|vocab_size"),
    ]:
        path = _copy(qwen3_dir, tmp_path / name)
        _edit_config(path, **change)
        with pytest.raises(InvalidArgument, match=message):
            load_model(path)
    with pytest.raises(InvalidArgument, match="dtype 'float8'"):
        load_model(qwen3_dir, dtype="float8")


def test_missing_or_misshaped_tensors_are_named(tmp_path, qwen3_dir):
    missing = _copy(qwen3_dir, tmp_path / "missing")
    tensors = load_file(missing / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, missing / "model.safetensors")
    with pytest.raises(InvalidArgument, match="missing tensor 'model.layers.1.self_attn.k_norm.weight'"):
        load_model(missing)

    shaped = _copy(qwen3_dir, tmp_path / "shaped")
    tensors = load_file(shaped / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 64)
    save_file(tensors, shaped / "model.safetensors")
    with pytest.raises(InvalidArgument, match=r"'model.layers.0.self_attn.q_proj.weight' in model.safetensors has "
                                              r"shape \(3, 64\), expected \(64, 64\)"):
        load_model(shaped)

    corrupt = _copy(qwen3_dir, tmp_path / "corrupt")
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(InvalidArgument, match="not a readable safetensors file"):
        load_model(corrupt)

    lost_shard = make_tiny("qwen3", tmp_path / "lost_shard", sharded=True, num_hidden_layers=1)
    next(lost_shard.glob("model-*.safetensors")).unlink()
    with pytest.raises(InvalidArgument, match="shard files missing"):
        load_model(lost_shard)


def test_omni_lm_head_tying_follows_thinker_config(tmp_path):
    from tests.engine.models.reference import hf_greedy

    path = make_tiny(TINY_MODELS["qwen3_omni_moe"], tmp_path / "omni", num_hidden_layers=1)
    cfg = json.loads((path / "config.json").read_text())
    cfg["thinker_config"]["text_config"]["tie_word_embeddings"] = True  # transformers ignores this one
    (path / "config.json").write_text(json.dumps(cfg))
    model = load_model(path, text_part=TEXT_PARTS["qwen3_omni_moe"])
    assert model.lm_head is not None
    prompt = random_prompt(6)
    _, ref = hf_greedy(path, "qwen3_omni_moe", prompt, 1)
    torch.testing.assert_close(_logits(model, prompt), ref[0], atol=1e-4, rtol=0)
