"""Per-process CPU time and run-queue wait over a window of a benchmark run.

A burst's tail is either work (the processes' CPU) or waiting. On a machine whose cores
the mesh's processes share, waiting includes time a runnable thread spent in the kernel's
run queue while other processes held the cores. Linux counts both per thread in
/proc/<pid>/task/<tid>/schedstat (on-CPU ns, run-queue ns, timeslices), in nanoseconds.

    with CpuSampler({"talker": pid, ...}) as sampler:
        ...                                    # the run
    sampler.window(start_s, end_s)             # {name: {"cpu_ms", "runq_wait_ms"}, ...}

The sampler reads every process's threads each `period_s` on a thread of this process,
so the window is the samples just before `start_s` and just after `end_s` (it covers the
asked window, and `span_ms` says by how much more), and the sampler's own CPU is part of
this process's figure: `sampler_cpu_ms` estimates it, to subtract. A thread that is on a
core when it is read shows its time up to its last scheduler tick (a few ms). Elsewhere
than Linux every figure is 0.
"""
from __future__ import annotations

import bisect
import glob
import os
import threading
import time


def sched_ns(pid: int) -> tuple[int, int]:
    """(on-CPU ns, run-queue wait ns) of every thread of `pid` so far; threads that ended
    are not counted (a process's worker threads live as long as it does)."""
    on_cpu = waiting = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                fields = f.read().split()
        except OSError:  # the thread ended meanwhile
            continue
        on_cpu += int(fields[0])
        waiting += int(fields[1])
    return on_cpu, waiting


class CpuSampler:
    def __init__(self, pids: dict[str, int], period_s: float = 0.02) -> None:
        """pids: name -> process id (this process's own may be one of them)."""
        if period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        self.pids = dict(pids)
        self.period_s = period_s
        self.times: list[float] = []  # wall clock (time.time()) of each sample, ascending
        self.samples: list[dict[str, tuple[int, int]]] = []
        self._cost_s: list[float] = []  # the sampler thread's CPU per sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> "CpuSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def _sample(self) -> None:
        t0 = time.thread_time()
        sample = {name: sched_ns(pid) for name, pid in self.pids.items()}
        self._cost_s.append(time.thread_time() - t0)
        self.times.append(time.time())
        self.samples.append(sample)

    def window(self, start_s: float, end_s: float) -> dict:
        """Per process, CPU and run-queue wait in ms between the last sample at or before
        `start_s` and the first at or after `end_s` (wall clock); raises ValueError when
        the samples do not cover the window."""
        i = bisect.bisect_right(self.times, start_s) - 1
        j = bisect.bisect_left(self.times, end_s)
        if i < 0 or j >= len(self.times):
            raise ValueError(f"no samples around [{start_s}, {end_s}]: sampled {self.times[:1]}..{self.times[-1:]}")
        first, last = self.samples[i], self.samples[j]
        out = {name: {"cpu_ms": (last[name][0] - first[name][0]) / 1e6,
                      "runq_wait_ms": (last[name][1] - first[name][1]) / 1e6} for name in self.pids}
        cost = self._cost_s[i + 1:j + 1]
        return {"processes": out, "span_ms": (self.times[j] - self.times[i]) * 1e3,
                "sampler_cpu_ms": sum(cost) * 1e3, "sampler_pid": os.getpid()}
