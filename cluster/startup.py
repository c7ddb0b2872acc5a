"""Where `starmesh up`'s start-up time goes, phase by phase (`starmesh up --verbose`).

    times = StartupTimes()
    with times.phase("trace store"):
        ...
    wait_all(cluster.services, timeout_s, times)   # every launched process SERVING, in parallel
    for line in times.lines(): print(line)

A phase is wall time on `up`'s own path: the serial steps before any child starts
(interpreter and imports, deployment file, trace store, port check, checkpoints) and the
waits for the children. Each child also gets its time from launch to SERVING and the CPU
seconds it had used by then (its imports, weights and warm-up: on a host with fewer
cores than processes, the sum of those is what the services' wait is made of).
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field


def process_age_s(pid: int | str = "self") -> float | None:
    """Seconds since process `pid` started (Linux /proc; None elsewhere or when unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"))


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process `pid` used so far (Linux /proc; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Ready:
    """One child: wall seconds from its launch to SERVING, and its CPU seconds by then."""

    name: str
    after_s: float
    cpu_s: float | None


@dataclass
class StartupTimes:
    """The phases of one start in order (name, wall seconds) and each child's Ready."""

    phases: list[tuple[str, float]] = field(default_factory=list)
    ready: dict[str, Ready] = field(default_factory=dict)
    launched: dict[str, float] = field(default_factory=dict)  # name -> monotonic launch time
    waited_by: dict[str, tuple[str, ...]] = field(default_factory=dict)  # phase -> the children it waited for
    started_at: float = field(default_factory=time.monotonic)

    def add(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds))

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t0)

    def wait(self, phase: str, procs: list, timeout_s: float) -> None:
        """The phase of waiting for `procs` (wait_all), each filed under it in lines()."""
        with self.phase(phase):
            wait_all(procs, timeout_s, self)
        self.waited_by[phase] = tuple(p.name for p in procs)

    def launching(self, proc) -> None:
        self.launched[proc.name] = time.monotonic()

    def serving(self, proc) -> None:
        since = self.launched.get(proc.name, self.started_at)
        self.ready[proc.name] = Ready(proc.name, time.monotonic() - since, cpu_seconds(proc.pid))

    def lines(self, total_s: float | None = None) -> list[str]:
        """The report `up --verbose` prints: phases in order, each child under the phase
        that waited for it, then the total (since `up` started, when known)."""
        out = ["start-up by phase (wall s; per process: launch -> SERVING, and its CPU s by then):"]
        for name, seconds in self.phases:
            out.append(f"  {name:<46} {seconds:6.2f}")
            for ready in self._children_of(name):
                cpu = f"cpu {ready.cpu_s:5.2f}" if ready.cpu_s is not None else "cpu -"
                out.append(f"    {ready.name:<44} {ready.after_s:6.2f}  {cpu}")
        cpu_sum = sum(r.cpu_s or 0.0 for r in self.ready.values())
        out.append(f"  {'children CPU, all together':<46} {cpu_sum:6.2f}")
        if total_s is not None:
            out.append(f"  {'total (since `up` started)':<46} {total_s:6.2f}")
        return out

    def _children_of(self, phase: str) -> list[Ready]:
        return [self.ready[n] for n in self.waited_by.get(phase, ()) if n in self.ready]


def wait_all(procs: list, timeout_s: float, times: StartupTimes | None = None, poll_s: float = 0.05) -> None:
    """Every launched runtime.process.ServiceProcess in `procs` SERVING, watched together:
    the first to exit fails the wait at once (RuntimeError naming it), whichever it is,
    and one not SERVING after `timeout_s` is a TimeoutError naming it."""
    pending = list(procs)
    deadline = time.monotonic() + timeout_s
    while pending:
        for proc in list(pending):
            if proc.is_serving():
                pending.remove(proc)
                if times is not None:
                    times.serving(proc)
            elif proc.proc.poll() is not None:
                proc.wait_serving()  # raises its RuntimeError: exited before SERVING
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"{pending[0].name} not SERVING after {timeout_s}s")
        if pending:
            time.sleep(poll_s)
