"""A second `starmesh up` on ports that some process still holds (an orphan of an earlier
one, say) fails at once, naming the address, instead of sharing the port with it.
(SIGKILL of `up` leaving no child: tests/cluster/test_chaos.py.)"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cluster.launchable import read_launchable
from cluster.shipped_deployments import rewrite_shipped
from tests.fixtures.processes import port_held

pytestmark = pytest.mark.timeout(120)


def test_up_fails_at_once_while_a_port_is_held(tmp_path):
    # the ports are checked before anything is loaded: no checkpoint is read
    path = rewrite_shipped("colocated", {"omni": str(tmp_path / "unused")}, ("qwen3-omni",), str(tmp_path))
    address = read_launchable(path).services["talker"].replicas[0]
    with port_held(address):
        up = subprocess.run([sys.executable, "-m", "cli", "up", "--deployment", str(path), "--no-trace-store"],
                            env={**os.environ, "STARMESH_CACHE": str(tmp_path / "cache")}, capture_output=True,
                            text=True, timeout=100)
    assert up.returncode == 2, up.stdout + up.stderr
    assert f"starmesh up: {address} (talker) is already in use by another process" in up.stderr, up.stderr
    assert "serving" not in up.stdout  # nothing started
