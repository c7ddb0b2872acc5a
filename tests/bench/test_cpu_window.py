"""bench.cpu_window: a window's figures cover at least the CPU the processes spent in it."""
import os
import subprocess
import sys
import time

import pytest

from bench.cpu_window import CpuSampler, sched_ns

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/schedstat"), reason="Linux schedstat")]


def burn(cpu_s: float) -> float:
    """Spins this thread until it has used `cpu_s` of CPU; returns what it used."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < cpu_s:
        pass
    return time.thread_time() - t0


def test_the_window_holds_the_cpu_this_process_burned_in_it():
    with CpuSampler({"me": os.getpid()}, period_s=0.005) as sampler:
        start = time.time()
        used = burn(0.05)
        # a running thread's schedstat lags up to a scheduler tick: block once, so that
        # every sample from `end` on has this thread's time
        time.sleep(0.02)
        end = time.time()
    w = sampler.window(start, end)
    me = w["processes"]["me"]
    # the window spans at least [start, end], and the process's threads include this one
    assert me["cpu_ms"] >= used * 1e3 and me["runq_wait_ms"] >= 0
    assert w["span_ms"] >= (end - start) * 1e3 and w["sampler_cpu_ms"] >= 0


def test_another_process_is_counted_and_a_window_outside_the_samples_is_an_error():
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"up\n"  # it has run (a process not yet scheduled has 0 ns)
        with CpuSampler({"child": child.pid, "me": os.getpid()}) as sampler:
            pass
        assert sched_ns(child.pid)[0] > 0  # its interpreter started: it has run
        with pytest.raises(ValueError, match="no samples"):
            sampler.window(sampler.times[0] - 10, sampler.times[-1])
        w = sampler.window(sampler.times[0], sampler.times[-1])
        assert set(w["processes"]) == {"child", "me"}
        assert all(p["cpu_ms"] >= 0 for p in w["processes"].values())
    finally:
        child.stdin.close()
        child.wait(10)


def test_a_process_that_is_gone_reads_as_nothing_spent():
    assert sched_ns(2 ** 22 + 12345) == (0, 0)
    with pytest.raises(ValueError):
        CpuSampler({}, period_s=0)
