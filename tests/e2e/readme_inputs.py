"""The files the documented examples read (made in their working directory), and the
check of the files they write."""
from __future__ import annotations

import json
import shlex
import sys
import wave
from pathlib import Path

import numpy as np

# what each written file starts with, by extension
MAGIC = {".wav": b"RIFF", ".png": b"\x89PNG"}


def make_inputs(root: Path) -> None:
    """q.wav (1 s of a tone), in.png, clip.gif (an animated GIF), the world model's
    f/a/s/g.npy (the tiny V-JEPA 2-AC's 64-pixel frames and 7-wide actions and states,
    rows to spare for a 4-step horizon) and reqs.jsonl for `generate --requests`."""
    from PIL import Image

    tone = (np.sin(np.arange(16000) * 0.05) * 8000).astype("<i2")
    with wave.open(str(root / "q.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(tone.tobytes())
    Image.new("RGB", (32, 32), (200, 80, 20)).save(root / "in.png")
    frames = [Image.new("RGB", (32, 32), (60 * i, 90, 30)) for i in range(4)]
    frames[0].save(root / "clip.gif", save_all=True, append_images=frames[1:], duration=250, loop=0)
    rng = np.random.default_rng(0)
    np.save(root / "f.npy", rng.standard_normal((4, 3, 64, 64)).astype("float32"))
    np.save(root / "g.npy", rng.standard_normal((1, 3, 64, 64)).astype("float32"))
    for name in ("a.npy", "s.npy"):
        np.save(root / name, (0.1 * rng.standard_normal((8, 7))).astype("float32"))
    lines = [{"input_ids": [1, 2, 3], "max_new_tokens": 4}, {"input_ids": [4, 5], "max_new_tokens": 3}]
    (root / "reqs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def checkout_commands(root: Path) -> Path:
    """root/.bin holding `starmesh`, `python3` and `python` that are this checkout's (a
    link to the venv's interpreter would leave the venv): the directory to put first on PATH."""
    bin_dir = root / ".bin"
    bin_dir.mkdir(exist_ok=True)
    for name, run in (("starmesh", "-m cli "), ("python3", ""), ("python", "")):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {run}"$@"\n')
        (bin_dir / name).chmod(0o755)
    return bin_dir


def output_files_ok(command: str, root: Path, before: dict[str, float]) -> bool:
    """Every `-o FILE` of the command was written, and every .wav or .png the command
    wrote (there or through the SDK) is one; AssertionError naming the file otherwise."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # not a shell command (a python block)
        words = []
    named = [root / words[i + 1] for i, w in enumerate(words[:-1]) if w == "-o"]
    for path in named:
        assert path.is_file() and path.stat().st_size > 0, f"{path.name} was not written"
        assert before.get(path.name) != path.stat().st_mtime_ns, f"{path.name} is an older file"
    changed = [p for p in root.iterdir() if p.is_file() and before.get(p.name) != p.stat().st_mtime_ns]
    for path in changed:
        magic = MAGIC.get(path.suffix)
        if magic is not None:
            assert path.read_bytes()[:len(magic)] == magic, f"{path.name} is not a {path.suffix} file"
    return True
