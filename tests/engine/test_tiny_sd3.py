"""`starmesh make-tiny sd3 DIR`: a diffusers-layout checkpoint that diffusers itself
loads offline, with locally built tokenizers; the same seed writes the same weights."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cli.main import main
from engine.models.sd3.checkpoint import geometry
from tests.fixtures import tiny_sd3

pytestmark = pytest.mark.timeout(120)


def test_make_tiny_sd3_writes_a_checkpoint_diffusers_loads(tmp_path, capsys):
    assert main(["make-tiny", "sd3", str(tmp_path / "a"), "--seed", "0"]) == 0
    index = json.loads((tmp_path / "a" / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusion3Pipeline"
    assert index["transformer"] == ["diffusers", "SD3Transformer2DModel"]
    for sub in ("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3"):
        a = load_file(next((tmp_path / "a" / sub).glob("*.safetensors")))
        b = load_file(next((Path(tiny_sd3.checkpoint()) / sub).glob("*.safetensors")))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), sub  # seed 0 both times
    vae = json.loads((tmp_path / "a" / "vae" / "config.json").read_text())
    assert vae["shift_factor"] is not None and vae["scaling_factor"] != 1.0


def test_tokenizers_are_local_and_tokenize():
    pipe = tiny_sd3.reference_pipeline()
    ids = pipe.tokenizer("A Red fox!", padding="max_length", max_length=77).input_ids
    assert len(ids) == 77 and ids[0] == pipe.tokenizer.bos_token_id
    assert pipe.tokenizer.decode(ids, skip_special_tokens=True).split() == ["a", "red", "fox", "!"]  # lowercased
    t5 = pipe.tokenizer_3("A Red fox!").input_ids
    assert t5[-1] == pipe.tokenizer_3.eos_token_id and pipe.tokenizer_3.unk_token_id not in t5
    assert max(ids) < pipe.text_encoder.config.vocab_size and max(t5) < pipe.text_encoder_3.config.vocab_size


def test_geometry_is_read_from_the_configs():
    g = geometry(tiny_sd3.checkpoint())
    assert (g.vae_scale_factor, g.patch_size, g.latent_channels, g.size_multiple) == (8, 2, 4, 16)
