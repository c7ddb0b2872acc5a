"""cluster/startup.py: the processes `up` launched are waited for together (the first that
exits fails the wait at once, whichever it is), and `--verbose`'s report files each
process under the phase that waited for it. Fake processes: nothing is started."""
from __future__ import annotations

import os

import pytest

from cluster.startup import StartupTimes, cpu_seconds, process_age_s, wait_all


class FakeProcess:
    """A launched runtime.process.ServiceProcess as wait_all sees it: SERVING after
    `serving_after` polls, or exited (code `exits`) after that many."""

    def __init__(self, name: str, serving_after: int | None = None, exits: int | None = None) -> None:
        self.name, self.pid, self.polls = name, os.getpid(), 0
        self.serving_after, self.exits = serving_after, exits
        self.proc = self

    def is_serving(self) -> bool:
        self.polls += 1
        return self.serving_after is not None and self.polls > self.serving_after

    def poll(self):
        return 1 if self.exits is not None and self.polls > self.exits else None

    def wait_serving(self):
        raise RuntimeError(f"{self.name} exited with 1 before SERVING")


def test_the_first_process_to_exit_fails_the_wait_whichever_it_is():
    slow, broken = FakeProcess("slow", serving_after=10**9), FakeProcess("broken", exits=2)
    with pytest.raises(RuntimeError, match="broken exited"):
        wait_all([slow, broken], timeout_s=60, poll_s=0)
    assert slow.polls < 10  # not waited for first


def test_a_process_not_serving_in_time_is_named():
    with pytest.raises(TimeoutError, match="stuck not SERVING after 0.0s"):
        wait_all([FakeProcess("ok", serving_after=0), FakeProcess("stuck", serving_after=10**9)], timeout_s=0.0,
                 poll_s=0)


def test_the_report_files_each_process_under_its_phase():
    times = StartupTimes()
    times.add("interpreter and imports of `up`", 0.25)
    procs = [FakeProcess("thinker", serving_after=3), FakeProcess("vae", serving_after=1)]
    for proc in procs:
        times.launching(proc)
    times.wait("services -> SERVING", procs, timeout_s=60)
    conductor = FakeProcess("conductor", serving_after=0)
    times.launching(conductor)
    times.wait("conductor -> SERVING", [conductor], timeout_s=60)
    lines = times.lines(total_s=1.5)
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["interpreter", "services", "thinker", "vae", "conductor", "conductor", "children", "total"]
    assert set(times.ready) == {"thinker", "vae", "conductor"}
    assert all(r.cpu_s is not None and r.cpu_s > 0 for r in times.ready.values())  # this process's, on Linux


def test_process_age_and_cpu_of_this_process():
    assert 0 < process_age_s() < 24 * 3600
    assert cpu_seconds(os.getpid()) > 0
    assert cpu_seconds(2**31 - 1) is None and process_age_s(2**31 - 1) is None
