"""`starmesh speak` against a real mesh (thinker and talker+codec as child processes, a
conductor in this process): the WAV it writes holds the mesh's audio at 16 bits, --json
prints exactly the issue's keys, and a conductor that is down, an unknown model or bad
ids end with a non-zero status and a message naming the problem."""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import wave

import numpy as np
import pytest
import torch

from cli.main import main
from cli.speak import WavSink
from client.speech import speak
from engine.models.qwen3_omni.tiny import chat_prompt
from tests.e2e.speech_mesh import CHUNK, LEFT, run
from tests.fixtures.services import conductor_over

pytestmark = pytest.mark.timeout(120)

TEXT = "Hello there"
OPTIONS = ["--max-text-tokens", "12", "--max-frames", "30", "--min-frames", "30"]
PARAMS = {"max_new_tokens": 12, "max_frames": 30, "min_frames": 30}
KEYS = {"text_ids", "codec_codes", "ttfa_ms", "rtf", "audio_s", "num_chunks"}


@pytest.fixture(scope="module")
def conductor(tiny_omni):
    """A co-located speech model ("omni") on two service processes, started side by side."""
    from pipelines.qwen3_omni.model import speakers, speech_model, speech_placement
    from runtime.process import ServiceProcess

    procs = [ServiceProcess(name, ["--checkpoint", str(tiny_omni), "--log-level", "WARNING"], name=name)
             for name in ("thinker", "talker+codec")]
    def models(a):  # "omni" with the checkpoint's tokenizer on the conductor, "omni-ids" without one
        speech = speech_model("omni", speech_placement([a[0]], [a[1]]), CHUNK, LEFT, first_chunk=2)
        ids_only = speech_model("omni-ids", speech_placement([a[0]], [a[1]]), CHUNK, LEFT, first_chunk=2)
        return [dataclasses.replace(speech, tokenizer_dir=str(tiny_omni), voices=speakers(str(tiny_omni))), ids_only]

    with conductor_over(procs, models) as address:
        yield address


def _read_wav(path) -> np.ndarray:
    with wave.open(str(path), "rb") as f:
        assert (f.getnchannels(), f.getsampwidth(), f.getframerate()) == (1, 2, 24000)
        return np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")


@pytest.mark.parametrize("where", ["conductor", "client"])
def test_speak_writes_the_mesh_audio_and_prints_json(conductor, tiny_omni, tmp_path, capsys, where):
    """--text tokenized by the conductor (its chat template) or here (--tokenizer): the same ids."""
    out = tmp_path / "x.wav"
    tokenizer = ["--tokenizer", str(tiny_omni)] if where == "client" else []
    status = main(["speak", "--model", "omni", "--text", TEXT, *tokenizer, "-o", str(out),
                   "--conductor", conductor, *OPTIONS, "--json"])
    printed = capsys.readouterr().out
    assert status == 0
    got = json.loads(printed)
    assert set(got) == KEYS
    ref = run(speak(conductor, "omni", chat_prompt(TEXT), PARAMS))  # the mesh's own answer (greedy)
    assert got["text_ids"] == ref.text_ids and got["codec_codes"] == ref.codec_codes
    assert got["num_chunks"] == ref.num_chunks > 1 and got["ttfa_ms"] > 0 and got["rtf"] > 0
    audio = torch.cat(ref.chunks).numpy()
    expected = np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)
    frames = _read_wav(out)
    assert np.array_equal(frames, expected)
    assert got["audio_s"] == pytest.approx(len(frames) / 24000)


def test_speak_prints_a_human_summary(conductor, tmp_path, capsys):
    out = tmp_path / "y.wav"
    assert main(["speak", "--model", "omni", "--input-ids", ",".join(map(str, chat_prompt("abc"))),
                 "-o", str(out), "--address", conductor, *OPTIONS]) == 0
    printed = capsys.readouterr().out
    for words in ("time to first audio", "real-time factor", "audio seconds", "chunks"):
        assert words in printed
    assert len(_read_wav(out)) > 0


def test_the_wav_is_valid_after_every_chunk(tmp_path):
    sink = WavSink(str(tmp_path / "z.wav"), 24000)
    sink.write(torch.full((100,), 0.5))
    assert len(_read_wav(tmp_path / "z.wav")) == 100  # readable mid-stream: the header is patched
    sink.write(torch.tensor([2.0, -2.0]))  # clipped, not wrapped
    sink.close()
    assert _read_wav(tmp_path / "z.wav")[-2:].tolist() == [32767, -32767]


def test_conductor_down_fails_clearly(tmp_path):
    out = tmp_path / "down.wav"
    proc = subprocess.run([sys.executable, "-m", "cli", "speak", "--model", "omni", "--input-ids", "1,2,3",
                           "-o", str(out), "--address", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "conductor at 127.0.0.1:1 is unavailable (UNAVAILABLE)" in proc.stderr
    assert not out.exists()  # no audio arrived: no file left behind


def test_text_is_tokenized_by_the_checkpoint_tokenizer(tiny_omni):
    from cli.speak import prompt_ids

    def args(model: str, tokenizer=None, text=TEXT):
        return argparse.Namespace(model=model, text=text, tokenizer=tokenizer, input_ids=None)

    assert prompt_ids(args("omni", str(tiny_omni))) == chat_prompt(TEXT)
    assert prompt_ids(args("omni")) is None  # the conductor tokenizes it
    with pytest.raises(ValueError, match="--tokenizer: tokenizer .* is not a directory"):
        prompt_ids(args("omni", str(tiny_omni / "nope")))


@pytest.mark.parametrize("argv, status, words", [
    (["--model", "omni-ids", "--text", "hi"], 1, ["no tokenizer on this conductor", "INVALID_ARGUMENT"]),
    (["--model", "omni", "--text", "hi", "--speaker", "nobody"], 1, ["params.speaker", "INVALID_ARGUMENT"]),
    (["--model", "omni", "--text", ""], 2, ["--text is empty"]),
    (["--model", "nope", "--input-ids", "1,2,3"], 1, ["'nope'", "INVALID_ARGUMENT"]),
    (["--model", "omni", "--input-ids", "1,99999"], 1, ["INVALID_ARGUMENT", "99999"]),
    (["--model", "omni", "--input-ids", "1,x"], 2, ["'x' is not an integer id"]),
    (["--model", "omni", "--input-ids", "1,-5"], 2, ["-5 is negative"]),
])
def test_bad_requests_fail_clearly(conductor, tmp_path, capsys, argv, status, words):
    assert main(["speak", *argv, "-o", str(tmp_path / "bad.wav"), "--address", conductor]) == status
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
