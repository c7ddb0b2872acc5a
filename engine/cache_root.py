"""Where starmesh keeps what it builds once per machine (tiny checkpoints, compiled CPU
kernels, the local trace store's address, Phoenix's venv): $STARMESH_CACHE, default
~/.cache/starmesh. Here, below engine/ and cluster/, so both read one rule."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("STARMESH_CACHE") or Path.home() / ".cache" / "starmesh")
