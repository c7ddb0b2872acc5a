"""Where starmesh keeps what it builds once per machine (tiny checkpoints, compiled CPU
kernels, the local trace store's address, Phoenix's venv): $STARMESH_CACHE, default
~/.cache/starmesh. One rule for every package that caches something."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("STARMESH_CACHE") or Path.home() / ".cache" / "starmesh")
