"""The Orpheus CLI: `make-tiny orpheus`, `convert snac` and `speak --model orpheus --voice`
against a real mesh (the LM service and a codec service as child processes): the WAV
holds the mesh's audio for the Orpheus prompt of the text, with Orpheus' sampling
defaults; a bad voice or a SNAC source without weights end with status 2 naming it."""
from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch

from cli.main import main
from client.speech import speak
from engine.models.orpheus.prompt import speech_prompt_ids
from pipelines.orpheus.params import RECOMMENDED
from tests.fixtures.services import conductor_over
from tests.fixtures.tiny_orpheus import checkpoint

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def conductor():
    from pipelines.orpheus.model import orpheus_model, orpheus_placement
    from runtime.process import ServiceProcess

    procs = [ServiceProcess(name, ["--checkpoint", checkpoint(), "--log-level", "WARNING"], name=name)
             for name in ("orpheus_lm", "codec")]
    with conductor_over(procs, lambda a: [orpheus_model("orpheus", orpheus_placement([a[0]], [a[1]]))]) as address:
        yield address


def test_speak_orpheus_writes_the_mesh_audio(conductor, tmp_path, capsys):
    import asyncio

    out = tmp_path / "o.wav"
    status = main(["speak", "--model", "orpheus", "--text", "Hello there", "--voice", "zoe", "--tokenizer",
                   checkpoint(), "--max-text-tokens", "50", "--seed", "4", "-o", str(out), "--address", conductor,
                   "--json"])
    assert status == 0
    got = json.loads(capsys.readouterr().out)
    ids = speech_prompt_ids(checkpoint(), "Hello there", "zoe")
    ref = asyncio.run(speak(conductor, "orpheus", ids, {**RECOMMENDED, "max_new_tokens": 50, "seed": 4}))
    assert got["text_ids"] == ref.text_ids and got["num_chunks"] == ref.num_chunks >= 3
    expected = np.round(np.clip(torch.cat(ref.chunks).numpy(), -1, 1) * 32767).astype(np.int16)
    with wave.open(str(out), "rb") as f:
        assert f.getframerate() == 24000
        assert np.array_equal(np.frombuffer(f.readframes(f.getnframes()), dtype="<i2"), expected)


def test_speak_orpheus_names_a_bad_voice(tmp_path, capsys):
    status = main(["speak", "--model", "orpheus", "--text", "hi", "--voice", "bob", "--tokenizer", checkpoint(),
                   "-o", str(tmp_path / "x.wav")])
    assert status == 2 and "voice 'bob'" in capsys.readouterr().err


def test_make_tiny_orpheus_and_convert_snac(tmp_path, capsys):
    from safetensors.torch import load_file

    assert main(["make-tiny", "orpheus", str(tmp_path / "o"), "--seed", "1"]) == 0
    snac = tmp_path / "o" / "snac"
    assert {"config.json", "model.safetensors"} <= {p.name for p in snac.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "o").iterdir()}
    torch.save(load_file(str(snac / "model.safetensors")), snac / "pytorch_model.bin")  # as released
    assert main(["convert", "snac", str(snac), str(tmp_path / "converted")]) == 0
    converted = load_file(str(tmp_path / "converted" / "model.safetensors"))
    assert converted.keys() == load_file(str(snac / "model.safetensors")).keys()
    assert main(["convert", "snac", str(tmp_path / "o"), str(tmp_path / "bad")]) == 2  # the LM dir: no SNAC config
    assert "snac" in capsys.readouterr().err.lower()
