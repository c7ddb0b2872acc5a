"""`starmesh up` as users run it: the default deployment (both models), one speech and
one image request, then SIGTERM: no child process, port or /dev/shm arena is left."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import pytest

from client.speech import speak
from engine.models.qwen3_omni.tiny import chat_prompt
from cluster.shipped_deployments import rewrite_shipped
from tests.fixtures import tiny_orpheus, tiny_sd3, tiny_vjepa2
from tests.fixtures.processes import children as _children, port_open as _port_open, printed_endpoints
from tests.fixtures.processes import wait_for_line as _wait_for_line
from tests.fixtures.services import describe

pytestmark = pytest.mark.timeout(400)


def test_up_serves_speech_and_image_then_stops_clean(tiny_omni, tmp_path):
    checkpoints = {"omni": str(tiny_omni), "sd3": tiny_sd3.checkpoint(), "vjepa2": tiny_vjepa2.checkpoint(),
                   "orpheus": tiny_orpheus.checkpoint()}
    path = rewrite_shipped("local", checkpoints, directory=str(tmp_path))
    env = {**os.environ, "STARMESH_CACHE": str(tmp_path / "cache")}
    up = subprocess.Popen([sys.executable, "-m", "cli", "up", "--deployment", str(path)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = _wait_for_line(up, "Ctrl-C stops everything", 300)
        endpoints = printed_endpoints(lines)
        conductor = endpoints.pop("conductor")
        gateway = endpoints.pop("gateway")  # http://HOST:PORT: the deployment's gateway, in front of the conductor
        assert _gateway_ready(gateway)
        arenas = {describe(a).arena for a in endpoints.values()}
        children = _children(up.pid)
        summary = asyncio.run(speak(conductor, "qwen3-omni", chat_prompt("hi"), {"max_new_tokens": 8,
                                                                                 "max_frames": 30}))
        assert summary.num_chunks > 0
        image = subprocess.run([sys.executable, "-m", "cli", "imagine", "--conductor", conductor, "--prompt",
                                "a fox", "-o", str(tmp_path / "fox.png"), "--steps", "2", "--size", "64x64",
                                "--json"], capture_output=True, text=True, timeout=120)
        assert image.returncode == 0, image.stderr
        assert (tmp_path / "fox.png").stat().st_size > 0
        _rollout(conductor, tmp_path)
    finally:
        up.send_signal(signal.SIGTERM)
        rest = up.communicate(timeout=120)[0]
    assert up.returncode == 0, rest[-3000:]
    assert len(children) == len(endpoints) + 2  # every service, the conductor and the gateway
    assert not [pid for pid in children if os.path.exists(f"/proc/{pid}")]
    assert not [a for a in [conductor, gateway.removeprefix("http://"), *endpoints.values()] if _port_open(a)]
    assert not [a for a in arenas if os.path.exists(f"/dev/shm/{a}")]


def _gateway_ready(url: str) -> bool:
    """The gateway answers /health (no token) with every model of the deployment SERVING."""
    import httpx

    health = httpx.get(f"{url}/health", timeout=30)
    return health.status_code == 200 and set(health.json()["models"]) == {"qwen3-omni", "sd3", "orpheus", "vjepa2-ac"}


def _rollout(conductor: str, tmp_path) -> None:
    """`starmesh rollout` against the default deployment's world model."""
    import json

    import numpy as np

    arrays = {"frames": tiny_vjepa2.frames(4), "actions": tiny_vjepa2.actions(3), "states": tiny_vjepa2.actions(3)}
    args = []
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value.numpy())
        args += [f"--{name}", str(tmp_path / f"{name}.npy")]
    done = subprocess.run([sys.executable, "-m", "cli", "rollout", "--conductor", conductor, *args, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["horizon"] == 2
