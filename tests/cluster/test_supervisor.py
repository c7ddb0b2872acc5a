"""The supervisor on real child processes: a killed service is logged and restarted on
its port; a child that keeps dying is reported as a crash loop; a tethered child dies
with its parent, even when the parent is SIGKILLed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cluster.supervisor import Supervisor, SupervisorConfig, backoff_s, describe_exit
from runtime.parent_death import tethered
from runtime.process import ServiceProcess
from tests.fixtures import registry
from tests.fixtures.processes import is_alive
from tests.fixtures.services import describe, wait_until

pytestmark = pytest.mark.timeout(120)
ECHO = "tests.fixtures.components:make_echo"


def test_backoff_doubles_up_to_the_cap_and_exits_are_named():
    config = SupervisorConfig(backoff_base_s=0.5, backoff_max_s=10.0)
    assert [backoff_s(config, n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL" and describe_exit(3) == "exit code 3"
    with pytest.raises(ValueError, match="supervision.backoff_max_s"):
        SupervisorConfig(backoff_base_s=2.0, backoff_max_s=1.0)


@pytest.fixture
def echo():
    lines: list[str] = []
    proc = ServiceProcess(ECHO, name="echo", log=lines.append, die_with_parent=True).start()
    proc.lines = lines
    registry.register(proc.address, describe(proc.address).arena)
    yield proc
    registry.unregister(proc.address)
    proc.stop()
    proc._tmp.cleanup()


def test_a_killed_service_is_restarted_on_its_port(echo):
    lines: list[str] = []
    supervisor = Supervisor(SupervisorConfig(backoff_base_s=0.05), lines.append)
    supervisor.watch(echo)
    supervisor.start()
    try:
        pid, port, arena = echo.pid, echo.port, describe(echo.address).arena
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: supervisor.status()["echo"]["restarts"] == 1, 60), lines
        status = supervisor.status()["echo"]
        assert status["state"] == "serving" and status["last_exit"] == "killed by SIGKILL"
        assert echo.pid != pid and echo.port == port
        assert f"starmesh | echo (pid {pid}) died: killed by SIGKILL" in lines
        assert "starmesh | restarting echo in 0.05 s" in lines
        new_arena = describe(echo.address).arena  # it serves again, on the same address
        assert new_arena != arena and not os.path.exists(f"/dev/shm/{arena}")  # its start swept the dead one's
        registry.register(echo.address, new_arena)
    finally:
        supervisor.hold()
        echo.stop()
        supervisor.close()


def test_a_child_that_keeps_dying_is_reported_as_a_crash_loop(echo):
    lines: list[str] = []
    config = SupervisorConfig(backoff_base_s=0.01, backoff_max_s=0.05, crash_loop_restarts=3)
    supervisor = Supervisor(config, lines.append)
    supervisor.watch(echo)
    supervisor.start()
    try:
        echo.args.append("--no-such-flag")  # every restart now exits at once (a broken install, say)
        echo.kill()
        assert wait_until(lambda: supervisor.status()["echo"]["is_crash_loop"], 60), lines
        assert any(line.startswith("starmesh | CRASH LOOP: echo died 3 times within 60 s") for line in lines), lines
        assert "exit code 2 before SERVING" in supervisor.status()["echo"]["last_exit"]
        assert "starmesh | restarting echo in 0.02 s" in lines  # doubling from the base ...
        assert wait_until(lambda: "starmesh | restarting echo in 0.05 s" in lines, 60), lines  # ... up to the cap
    finally:
        supervisor.close()
        echo.args.remove("--no-such-flag")
    from transport.segment import sweep_stale_segments

    sweep_stale_segments()  # the killed echo's arena: no restart served to sweep it
    registry.unregister(echo.address)


def test_a_tethered_child_dies_with_its_sigkilled_parent():
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys\n"
         "from runtime.parent_death import tethered\n"
         "child = subprocess.Popen(tethered(['sleep', '600']))\n"
         "print(child.pid, flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert wait_until(lambda: open(f"/proc/{child}/cmdline").read().startswith("sleep"), 10)  # exec'd
    parent.kill()
    parent.wait()
    assert wait_until(lambda: not is_alive(child), 10)


def test_a_tethered_command_does_not_run_once_its_parent_is_gone():
    # the parent it names is not its parent: as if that one died before the signal was armed
    done = subprocess.run(tethered([sys.executable, "-c", "print('ran')"], parent_pid=1), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1 and "ran" not in done.stdout
