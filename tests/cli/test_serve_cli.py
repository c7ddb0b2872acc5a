"""`starmesh serve` as a real subprocess: health, the `starmesh health` CLI, SIGTERM."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import grpc
import pytest
import torch

from runtime.items import OpenNode
from tests.fixtures import registry
from tests.fixtures.components import inline_ref, inline_tensor
from runtime.process import ServiceProcess
from runtime.replica_probe import Health, check_health, replica_status
from tests.fixtures.services import REPO, RunStream, describe

pytestmark = pytest.mark.timeout(90)


def _cli(*args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.fixture(scope="module")
def served():
    """One `starmesh serve` subprocess for the module; the SIGTERM test ends it."""
    proc = ServiceProcess("tests.fixtures.components:make_sum").start()
    arena = describe(proc.address).arena
    registry.register(proc.address, arena)
    yield proc, arena
    registry.unregister(proc.address)
    proc.stop()


def test_help_and_version():
    result = _cli("--help")
    assert result.returncode == 0 and "serve" in result.stdout and "health" in result.stdout
    result = _cli("version")
    assert result.returncode == 0 and result.stdout.startswith("starmesh ")


def test_health_cli_agrees_with_serving(served):
    proc, _ = served
    result = _cli("health", proc.address)
    assert (result.returncode, result.stdout.strip()) == (0, "SERVING"), result
    result = _cli("health", proc.address, "--service", "starmesh.v1.Component")
    assert result.returncode == 0, result
    result = _cli("health", proc.address, "--service", "no.such.Service")
    assert result.returncode == 1 and "NOT_FOUND" in result.stderr, result


def test_health_cli_fails_on_a_closed_port():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = _cli("health", f"127.0.0.1:{port}", "--timeout", "2")
    assert result.returncode != 0 and "UNAVAILABLE" in result.stderr, result


def test_subprocess_serves_the_factory_component(served):
    proc, _ = served
    info = describe(proc.address)
    assert (info.name, list(info.nodes)) == ("sum", ["sum"]) and info.version
    with RunStream(proc.address) as stream:
        stream.send(OpenNode(request_id="s", node="sum", inputs={"x": inline_ref(torch.arange(10, dtype=torch.int32))}))
        out, _done = stream.events()
        assert inline_tensor(out.tensors["x"]).item() == 45.0


def test_replica_probe_reads_health_and_describe(served):
    proc, _ = served
    assert check_health(proc.address) == Health("SERVING")
    status = replica_status(proc.address)
    assert (status["address"], status["health"], status["open_requests"]) == (proc.address, "SERVING", 0)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    assert replica_status(closed, timeout_s=2) == {"address": closed, "health": "DOWN", "error": "UNAVAILABLE"}
    down = check_health(closed, timeout_s=2)
    assert down.status == "UNAVAILABLE" and down.error is not None and not down.is_serving


def test_sigterm_exits_cleanly_and_unlinks_the_arena(served):
    proc, arena = served
    assert os.path.exists(f"/dev/shm/{arena}")
    stream = RunStream(proc.address)  # an idle Run stream must not hold up shutdown
    stream.send(OpenNode(request_id="t", node="sum", inputs={"x": inline_ref(torch.ones(2))}))
    stream.events()
    registry.unregister(proc.address)
    assert proc.stop(timeout_s=30) == 0  # SIGTERM
    assert stream.recv() is None and stream.error is not None
    assert stream.error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    stream.close()
    assert not os.path.exists(f"/dev/shm/{arena}")


def _nice_of(pid: int) -> set[int]:
    """The nice value of each of the process's threads (/proc/PID/task/TID/stat field 19)."""
    values = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            values.add(int(f.read().rsplit(")", 1)[1].split()[16]))
    return values


def test_nice_lowers_the_priority_of_every_thread_of_the_service():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base + 5 > 19:
        pytest.skip("this process is already at the lowest priority")
    proc = ServiceProcess("tests.fixtures.components:make_sum", ["--nice", "5"], name="niced").start()
    try:
        assert _nice_of(proc.pid) == {base + 5}  # grpc's and the step loop's threads too
    finally:
        proc.stop()
    result = _cli("serve", "tests.fixtures.components:make_sum", "--nice", "20")
    assert result.returncode == 2 and "nice must be an int in [0, 19], got 20" in result.stderr, result
