"""The supervisor's liveness probe against a real service process: the health check is
answered while one engine step spins in Python; a service kept busy that way, on a
machine loaded with CPU hogs, is probed again and again and never restarted; the same
service stopped with SIGSTOP stops answering and the supervisor kills and restarts it."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest
import torch

from cluster.liveness_probe import LivenessProbe
from cluster.supervisor import Supervisor, SupervisorConfig
from runtime.health_list import LIVENESS
from runtime.items import OpenNode
from runtime.process import ServiceProcess
from runtime.replica_probe import check_health
from tests.fixtures.services import RunStream, describe, wait_until
from transport.codec import inline_ref

pytestmark = pytest.mark.timeout(400)
NUM_HOGS = 6  # with the spinning step and the machine's own load: a load of 7 or more


def spinning(address: str) -> bool:
    return dict(describe(address).load).get("spinning") == 1.0


@contextlib.contextmanager
def busy_step(address: str, until):
    """One engine step that spins until the file `until` exists (tests/fixtures/busy_component.py)."""
    with RunStream(address, timeout_s=600) as stream:
        stream.send(OpenNode("spin-1", "echo", inputs={"x": inline_ref(torch.arange(4.0))},
                             params={"until": str(until)}))
        try:
            assert wait_until(lambda: spinning(address), 120)
            yield
        finally:
            until.touch()


@contextlib.contextmanager
def cpu_hogs(n: int):
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.fixture
def busy(tmp_path):
    # niced as the default deployment's thinker is: the stage that yields its cores
    svc = ServiceProcess("tests.fixtures.busy_component:make_busy", ["--nice", "8"], name="busy").start()
    yield svc
    if svc.proc.poll() is None:
        os.kill(svc.proc.pid, signal.SIGCONT)
    svc.stop(timeout_s=10)


def test_the_liveness_check_is_answered_while_an_engine_step_spins(busy, tmp_path):
    with busy_step(busy.address, tmp_path / "done"):
        health = check_health(busy.address, LIVENESS, timeout_s=60)
        assert health.is_serving, health
        assert spinning(busy.address)  # answered during the step, not after it
        assert check_health(busy.address, timeout_s=60).is_serving  # readiness too: the engine is busy, not down


def test_a_busy_service_is_not_restarted_and_a_stopped_one_is(busy, tmp_path):
    lines: list[str] = []
    # probed 4x as often as by default: what is judged is the number of probes answered and
    # missed, each with the default timeout (the time a busy service has to answer)
    config = SupervisorConfig(probe_period_s=SupervisorConfig.probe_period_s / 4)
    supervisor = Supervisor(config, lines.append)
    supervisor.watch(busy, LivenessProbe(lambda: busy.address))
    supervisor.start()
    try:
        with cpu_hogs(NUM_HOGS), busy_step(busy.address, tmp_path / "done"):
            # probed through 3x the misses that would convict it, spinning all along
            enough = 3 * config.probe_failures
            assert wait_until(lambda: supervisor.status()["busy"]["probes_answered"] >= enough, 300), lines
            assert spinning(busy.address)
        status = supervisor.status()["busy"]
        assert status["restarts"] == 0 and status["state"] == "serving", (status, lines)
        pid = busy.pid
        os.kill(pid, signal.SIGSTOP)
        assert wait_until(lambda: supervisor.status()["busy"]["restarts"] == 1
                          and supervisor.status()["busy"]["state"] == "serving", 180), lines
        status = supervisor.status()["busy"]
        assert status["last_exit"].startswith("hung: no answer to 3 health probes"), status
        assert busy.pid != pid and check_health(busy.address, LIVENESS, timeout_s=30).is_serving
        assert any(f"busy (pid {pid}) did not answer its health probe" in line for line in lines), lines
    finally:
        supervisor.hold()
        busy.stop(timeout_s=10)
        supervisor.close()
