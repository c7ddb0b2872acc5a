"""A stranger's client: stubs compiled from conductor.proto alone (grpc_tools, into a
temp dir), run in a process whose path holds only those stubs, gets text, audio and an
image from a real mesh (speech: thinker + talker/codec; image: SD3 co-located), reads
the models' params and voices from ListModels, and is refused an unknown voice."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import tiny_sd3
from tests.fixtures.services import REPO, conductor_over

pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def mesh(tiny_omni):
    from pipelines.qwen3_omni.model import speakers, speech_model, speech_placement
    from pipelines.sd3.model import served_model
    from runtime.process import ServiceProcess

    def models(addresses):
        thinker, talker, sd3 = addresses
        speech = speech_model("omni", speech_placement([thinker], [talker]), 4, 2)
        speech = dataclasses.replace(speech, tokenizer_dir=str(tiny_omni), voices=speakers(str(tiny_omni)))
        return [speech, served_model("sd3", sd3, sd3, sd3, fused=True)]

    procs = [ServiceProcess("thinker", ["--checkpoint", str(tiny_omni)], name="thinker"),
             ServiceProcess("talker+codec", ["--checkpoint", str(tiny_omni)], name="talker+codec"),
             ServiceProcess("sd3", ["--checkpoint", tiny_sd3.checkpoint()], name="sd3", start_timeout_s=120)]
    with conductor_over(procs, models) as address:
        yield address, tiny_omni


def _stubs(tmp: Path) -> None:
    """conductor.proto (and the tensor.proto it imports) compiled with grpc_tools."""
    for name in ("conductor.proto", "tensor.proto"):
        target = tmp / "protos/starmesh/v1" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(REPO) / "protos/starmesh/v1" / name, target)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(tmp), f"--python_out={tmp}",
                    f"--grpc_python_out={tmp}", str(tmp / "protos/starmesh/v1/conductor.proto"),
                    str(tmp / "protos/starmesh/v1/tensor.proto")], check=True)
    for package in ("protos", "protos/starmesh", "protos/starmesh/v1"):
        (tmp / package / "__init__.py").touch()  # regular packages: they shadow the installed project's
    shutil.copy(HERE / "proto_only_client.py", tmp / "client.py")


def test_a_client_from_the_proto_alone_gets_text_audio_and_an_image(mesh, tmp_path):
    from transformers import AutoTokenizer

    from client.speech import speak
    from engine.models.qwen3_omni.tiny import chat_prompt

    address, ckpt = mesh
    _stubs(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STARMESH_API_KEY")}
    done = subprocess.run([sys.executable, "-s", "client.py", address], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["stubs"].startswith(str(tmp_path)) and got["project_modules"] == [], "the client used the project"

    omni = got["models"]["omni"]
    assert omni["voices"] == ["chelsie", "ethan"] and omni["voice_param"] == "speaker" and omni["accepts_text"]
    assert {"max_frames", "max_new_tokens", "temperature", "speaker"} <= set(omni["params"])
    assert got["models"]["sd3"]["modalities"] == ["MODALITY_IMAGE"]
    assert got["bad_voice"][0] == "INVALID_ARGUMENT" and "params.speaker" in got["bad_voice"][1]

    speech = got["speech"]
    tokenizer = AutoTokenizer.from_pretrained(str(ckpt), local_files_only=True)
    assert speech["token_ids"] and speech["text"] == tokenizer.decode(speech["token_ids"], skip_special_tokens=True)
    assert set(speech["sample_rates"]) == {24000} and speech["sequence"] == list(range(len(speech["sequence"])))
    # the server's chat template gives the ids the SDK sends: the same greedy request
    params = {"max_new_tokens": 8, "max_frames": 6, "min_frames": 6, "speaker": "chelsie"}
    ref = asyncio.run(speak(address, "omni", chat_prompt("Hello there"), params))
    assert speech["token_ids"] == ref.text_ids
    assert speech["audio"] == pytest.approx([float(x) for c in ref.chunks for x in c], abs=0)
    usage = speech["usage"]
    assert usage["prompt_tokens"] == len(chat_prompt("Hello there")) and usage["completion_tokens"] == len(ref.text_ids)
    assert usage["audio_seconds"] == pytest.approx(len(speech["audio"]) / 24000) and usage["ttfa_ms"] > 0

    (image,) = got["image"]["images"]
    png = bytes.fromhex(image["png_hex"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and (image["width"], image["height"]) == (64, 64)
    assert image["mime_type"] == "image/png" and got["image"]["steps"][-1] == [2, 2]
