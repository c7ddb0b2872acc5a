"""Where a running `starmesh up` publishes its supervisor's view (cluster.supervisor):
one JSON file per conductor address under the cache root, rewritten on every change and
removed at stop, read by `starmesh status`.

    {"thinker": {"pid": 123, "address": "127.0.0.1:50061", "state": "serving",
                 "restarts": 1, "last_exit": "killed by SIGKILL", "is_crash_loop": false, ...}, ...}
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from core.cache_root import cache_root


def supervision_path(conductor_address: str, root: Path | None = None) -> Path:
    """root: the cache root of the `starmesh up` (default: this process's)."""
    name = f"{conductor_address.replace(':', '_').replace('/', '_')}.json"
    return (root or cache_root()) / "supervision" / name


def publish(conductor_address: str, status: dict) -> None:
    """Atomic: a reader never sees half a file."""
    path = supervision_path(conductor_address)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".sup-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(status, f)
    os.replace(tmp, path)


def read(conductor_address: str, root: Path | None = None) -> dict:
    """The published status, {} when no `starmesh up` runs this deployment."""
    try:
        return json.loads(supervision_path(conductor_address, root).read_text())
    except (OSError, ValueError):
        return {}


def unpublish(conductor_address: str) -> None:
    supervision_path(conductor_address).unlink(missing_ok=True)
