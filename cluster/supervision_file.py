"""Where a running `starmesh up` publishes its supervisor's view (cluster.supervisor):
one JSON file per conductor address under the cache root, rewritten on every change and
removed at stop, read by `starmesh status`.

    {"up_pid": 120, "processes": {"thinker": {"pid": 123, "address": "127.0.0.1:50061",
     "state": "serving", "restarts": 1, "last_exit": "killed by SIGKILL", "is_crash_loop": false, ...}, ...},
     "mesh_tls": "/home/u/.cache/starmesh/mesh-tls/up-120-..."}

mesh_tls: the directory of the members' certificates (cluster.mesh_ca; "" without), which
`starmesh status` probes the services with.

A file whose `up` is gone (killed before it could remove it) reads as nothing.
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


def publish(conductor_address: str, status: dict, mesh_tls: str = "") -> None:
    """Atomic: a reader never sees half a file."""
    path = supervision_path(conductor_address)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".sup-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump({"up_pid": os.getpid(), "processes": status, "mesh_tls": mesh_tls}, f)
    os.replace(tmp, path)


def read(conductor_address: str, root: Path | None = None) -> dict:
    """The published processes, {} when no `starmesh up` runs this deployment."""
    return _published(conductor_address, root).get("processes", {})


def mesh_tls_dir(conductor_address: str, root: Path | None = None) -> str:
    """The running `up`'s member certificate directory ("" when none runs, or without mesh_tls)."""
    return _published(conductor_address, root).get("mesh_tls", "")


def member_tls_of(conductor_address: str, root: Path | None = None):
    """The runtime.tls.TlsConfig that reaches the running `up`'s services as a member (None: none)."""
    from runtime.tls import member_tls

    directory = mesh_tls_dir(conductor_address, root)
    return member_tls(directory) if directory else None


def _published(conductor_address: str, root: Path | None) -> dict:
    try:
        data = json.loads(supervision_path(conductor_address, root).read_text())
        os.kill(data["up_pid"], 0)  # its writer still runs
        return data if isinstance(data.get("processes"), dict) else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def unpublish(conductor_address: str, root: Path | None = None) -> None:
    supervision_path(conductor_address, root).unlink(missing_ok=True)
