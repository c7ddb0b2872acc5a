"""`starmesh demo` as a new user runs it from a checkout: it ends with status 0, prints no
ERROR, no traceback and no third-party start-up noise in any process, and what it
writes (demo-output/, which it creates) leaves `git status` as it was: ignored, untracked.
Its images are real PNGs of the sizes asked: BAGEL's draw and its edit (at the size
BAGEL's resize rule gives the drawn input), which differs from the draw.

The default deployment on free ports (tests/e2e/default_up.py), so the demo runs beside
anything else on the machine; otherwise the command as the README gives it."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from tests.e2e.default_up import run_env, shipped_with_free_ports, trouble
from tests.e2e.doc_examples import REPO

pytestmark = pytest.mark.timeout(600)
NOISE = ("Loading weights", "Writing model shards", "Unrecognized keys in `rope_parameters`", "requires torchvision")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def test_the_demo_ends_clean_and_leaves_the_checkout_clean(tmp_path):
    out = REPO / "demo-output"
    started = time.time()
    demo = subprocess.run([sys.executable, "-m", "cli", "demo", "--deployment", str(shipped_with_free_ports(tmp_path))],
                          cwd=REPO, env=run_env(tmp_path), capture_output=True, text=True, timeout=540)
    text = demo.stdout + demo.stderr
    assert demo.returncode == 0, text[-4000:]
    assert not trouble(text), "\n".join(trouble(text)[:20]) + "\n" + text[-4000:]
    assert not [n for n in NOISE if n in text], text[:4000]
    assert "everything is stopped" in text
    written = [p for p in out.iterdir() if p.stat().st_mtime >= started - 1]
    assert {"speech.wav", "image.png", "bagel.png", "bagel-edit.png"} <= {p.name for p in written}
    _check_images(out, text)
    assert not _git("ls-files", "--", "demo-output")  # nothing of it is tracked, so nothing modified
    assert not _git("ls-files", "--others", "--exclude-standard", "--", "demo-output")  # nor untracked
    for path in written:
        assert _git("check-ignore", str(path.relative_to(REPO))).strip()


def _check_images(out, text: str) -> None:
    """image.png (sd3, 128x128), bagel.png (512x512) and bagel-edit.png decode as PNGs of
    those sizes, each printed with its latency; the edit is not the draw."""
    import numpy as np
    from PIL import Image

    from engine.models.bagel.preprocess import VAE_RESIZE

    sizes = {"image.png": (128, 128), "bagel.png": (512, 512), "bagel-edit.png": VAE_RESIZE.shape(512, 512)}
    pixels = {}
    for name, size in sizes.items():
        with Image.open(out / name) as im:
            assert (im.format, im.size, im.mode) == ("PNG", size, "RGB"), (name, im.format, im.size, im.mode)
            pixels[name] = np.asarray(im, dtype=np.int16)
        assert re.search(rf"demo-output/{re.escape(name)}: {size[0]}x{size[1]}, \d+ ms", text), (name, text[-3000:])
    assert "(edit of bagel.png by bagel)" in text
    assert np.abs(pixels["bagel-edit.png"] - pixels["bagel.png"]).mean() > 1.0  # mean over every channel, 0..255
