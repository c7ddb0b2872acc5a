"""`starmesh up` as users run it: the default deployment (every model, `--verbose`), one
speech, one image and one rollout request, then its stop (SIGINT; SIGTERM takes the same
path in cli/up.py): no child process, port or /dev/shm arena is left. The mesh is the
session's `local_up` (tests/cluster/local_up.py), which sent the speech and image
requests when it started; this test runs after every other test of it (tests/conftest.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fixtures import tiny_vjepa2
from tests.fixtures.processes import port_open as _port_open

pytestmark = pytest.mark.timeout(400)

PHASES = ("interpreter and imports of `up`", "deployment file", "trace store", "port check", "checkpoints",
          "launch", "13 services + gateway -> SERVING", "conductor -> SERVING", "children CPU", "total")


@pytest.mark.stops_local_up
def test_up_serves_speech_and_image_then_stops_clean(local_up, tmp_path):
    endpoints = dict(local_up.endpoints)
    conductor = endpoints.pop("conductor")
    gateway = endpoints.pop("gateway")  # http://HOST:PORT: the deployment's gateway, in front of the conductor
    try:
        assert _gateway_ready(gateway)
        assert local_up.speech.num_chunks > 0
        assert local_up.image.returncode == 0, local_up.image.stderr
        assert (local_up.directory / "fox.png").stat().st_size > 0
        _rollout(conductor, tmp_path)
        _printed_phases(local_up.lines, [*endpoints, "conductor", "gateway"])
    finally:
        returncode, rest = local_up.stop()
    assert returncode == 0, rest[-3000:]
    assert len(local_up.children) == len(endpoints) + 2  # every service, the conductor and the gateway
    assert not [pid for pid in local_up.children if os.path.exists(f"/proc/{pid}")]
    assert not [a for a in [conductor, gateway.removeprefix("http://"), *endpoints.values()] if _port_open(a)]
    assert not [a for a in local_up.arenas if os.path.exists(f"/dev/shm/{a}")]


def _printed_phases(lines: list[str], processes: list[str]) -> None:
    """`--verbose`: every phase of start-up, and every process under the phase that waited for it."""
    report = [line.split("|", 1)[1] for line in lines if line.startswith("starmesh |   ")]
    for phase in PHASES:
        assert any(line.strip().startswith(phase) for line in report), (phase, report)
    for name in processes:
        assert any(line.startswith(f"     {name} ") and "cpu" in line for line in report), (name, report)


def _gateway_ready(url: str) -> bool:
    """The gateway answers /health (no token) with every model of the deployment SERVING."""
    import httpx

    health = httpx.get(f"{url}/health", timeout=30)
    models = {"qwen3-omni", "sd3", "orpheus", "vjepa2-ac", "bagel"}
    return health.status_code == 200 and set(health.json()["models"]) == models


def _rollout(conductor: str, tmp_path) -> None:
    """`starmesh rollout` against the default deployment's world model."""
    import numpy as np

    # one timestep per frame: 2 frames and 3 actions leave a horizon of 2
    arrays = {"frames": tiny_vjepa2.frames(2), "actions": tiny_vjepa2.actions(3), "states": tiny_vjepa2.actions(3)}
    args = []
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value.numpy())
        args += [f"--{name}", str(tmp_path / f"{name}.npy")]
    done = subprocess.run([sys.executable, "-m", "cli", "rollout", "--conductor", conductor, *args, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["horizon"] == 2
