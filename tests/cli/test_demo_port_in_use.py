"""`starmesh demo` whose deployment cannot start (a port it needs held by another
process): one line on stderr naming what failed, a non-zero exit, no traceback, and
nothing of the deployment left running."""
from __future__ import annotations

import subprocess
import sys

import pytest

from cluster.launchable import read_launchable
from tests.e2e.default_up import run_env, shipped_with_free_ports, trouble
from tests.fixtures.processes import port_held, port_open

pytestmark = pytest.mark.timeout(120)


def test_the_demo_names_a_held_port_in_one_line_and_exits_non_zero(tmp_path):
    path = shipped_with_free_ports(tmp_path)
    spec = read_launchable(path)
    address = spec.services["codec"].replicas[0]
    with port_held(address):
        demo = subprocess.run([sys.executable, "-m", "cli", "demo", "--deployment", str(path), "--out-dir",
                               str(tmp_path / "out")], env=run_env(tmp_path), capture_output=True, text=True,
                              timeout=100)
    text = demo.stdout + demo.stderr
    assert demo.returncode == 2, text[-4000:]
    assert not trouble(text), text[-4000:]
    failure = [line for line in demo.stderr.splitlines() if line.strip()]
    assert len(failure) == 1, demo.stderr
    assert failure[0].startswith(f"starmesh demo: the deployment did not start: {address} (codec) is already "
                                 "in use by another process"), demo.stderr
    assert not [a for a in spec.bound_addresses().values() if a != address and port_open(a)]
