"""Watches a deployment's child processes and restarts the ones that die.

    supervisor = Supervisor(SupervisorConfig(), log)
    supervisor.watch(proc)          # a ServiceProcess that is SERVING
    supervisor.start()
    ...
    supervisor.hold()               # no more restarts: the cluster is stopping
    ... stop every child ...
    supervisor.close()

One thread polls every child (`poll_s`): a death is logged at once (name, pid, exit code
or signal), and the child is launched again on its port (clients reconnect to the same
address) after an exponential backoff: `backoff_base_s`, doubling per consecutive death,
at most `backoff_max_s`; a child that stayed up `stable_s` starts again from the base.
`crash_loop_restarts` deaths within `crash_loop_window_s` mark the child as crash-looping:
logged loudly and shown in status() until it stays up `stable_s`; it is still restarted
(at the backoff's pace), as an orchestrator would.

Restarts are launched from the supervisor's thread, which lives until close(): a child
tethered to its parent (runtime.parent_death) gets its parent-death signal when the
thread that forked it exits, so close() must come after every child stopped.
"""
from __future__ import annotations

import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from runtime.process import ServiceProcess


@dataclass(frozen=True)
class SupervisorConfig:
    backoff_base_s: float = 0.5
    backoff_max_s: float = 10.0
    stable_s: float = 30.0
    crash_loop_restarts: int = 5
    crash_loop_window_s: float = 60.0
    poll_s: float = 0.05

    def __post_init__(self) -> None:
        for name in ("backoff_base_s", "stable_s", "crash_loop_window_s", "poll_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"supervision.{name} must be > 0, got {getattr(self, name)}")
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError(f"supervision.backoff_max_s must be >= backoff_base_s ({self.backoff_base_s}), "
                             f"got {self.backoff_max_s}")
        if self.crash_loop_restarts < 1:
            raise ValueError(f"supervision.crash_loop_restarts must be >= 1, got {self.crash_loop_restarts}")


@dataclass
class _Child:
    """One supervised process. phase: serving -> backoff -> starting -> serving."""

    proc: ServiceProcess
    phase: str = "serving"
    up_since: float = field(default_factory=time.monotonic)
    num_restarts: int = 0
    num_consecutive: int = 0   # deaths since it last stayed up stable_s: the backoff's exponent
    deaths: deque = field(default_factory=deque)  # monotonic times of deaths within the crash-loop window
    is_crash_loop: bool = False
    last_exit: str = ""
    died_at: float = 0.0
    launched_at: float = 0.0
    next_start: float = 0.0
    last_restart_s: float | None = None  # death to SERVING again, the latest restart

    def status(self) -> dict:
        return {"pid": self.proc.proc.pid if self.proc.proc else None, "address": self.proc.address,
                "state": self.phase, "restarts": self.num_restarts, "last_exit": self.last_exit,
                "is_crash_loop": self.is_crash_loop, "last_restart_s": self.last_restart_s}


def backoff_s(config: SupervisorConfig, num_consecutive: int) -> float:
    """The delay before a restart after `num_consecutive` earlier deaths (0 for the first)."""
    return min(config.backoff_base_s * 2 ** min(num_consecutive, 64), config.backoff_max_s)


def describe_exit(returncode: int) -> str:
    """"exit code 1" or "killed by SIGKILL" (Popen's negative return code)."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


class Supervisor:
    """log: one line per event; on_change(status()) after every change (the published
    status file of `starmesh status`)."""

    def __init__(self, config: SupervisorConfig, log: Callable[[str], None],
                 on_change: Callable[[dict], None] | None = None) -> None:
        self.config = config
        self.log = log
        self.on_change = on_change
        self._children: dict[str, _Child] = {}
        self._lock = threading.Lock()
        self._holding = False
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="supervisor")

    def watch(self, proc: ServiceProcess) -> None:
        with self._lock:
            self._children[proc.name] = _Child(proc)

    def start(self) -> "Supervisor":
        self._thread.start()
        self._changed()
        return self

    def status(self) -> dict[str, dict]:
        """name -> {pid, address, state, restarts, last_exit, is_crash_loop, last_restart_s}."""
        with self._lock:
            return {name: child.status() for name, child in self._children.items()}

    def hold(self) -> None:
        """Stops watching (a launch in progress finishes first): the children are being
        stopped, their exits are not deaths."""
        with self._lock:
            self._holding = True

    def close(self) -> None:
        self.hold()
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._closed.wait(self.config.poll_s):
            with self._lock:
                if self._holding:
                    continue
                changed = [self._step(child, time.monotonic()) for child in self._children.values()]
            if any(changed):
                self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change(self.status())
            except OSError as e:  # the status file is a view: supervision goes on without it
                self.log(f"starmesh | could not publish the supervision status: {e}")

    def _step(self, child: _Child, now: float) -> bool:
        """Advances one child's phase; True when something changed."""
        popen = child.proc.proc
        if child.phase == "serving":
            if popen.poll() is not None:
                return self._died(child, describe_exit(popen.returncode), now)
            if child.is_crash_loop and now - child.up_since >= self.config.stable_s:
                child.is_crash_loop = False
                self.log(f"starmesh | {child.proc.name} stable again (up {self.config.stable_s:.0f} s)")
                return True
        elif child.phase == "backoff" and now >= child.next_start:
            try:
                child.proc.launch()
            except OSError as e:  # could not even fork or exec: a death like any other, backed off
                return self._died(child, f"could not start: {e}", now)
            child.phase, child.launched_at = "starting", now
            return True
        elif child.phase == "starting":
            return self._check_start(child, now)
        return False

    def _check_start(self, child: _Child, now: float) -> bool:
        proc = child.proc
        if proc.is_serving():
            child.phase, child.up_since = "serving", now
            child.num_restarts += 1
            child.last_restart_s = now - child.died_at
            self.log(f"starmesh | {proc.name} restarted (pid {proc.pid}), serving on {proc.address} "
                     f"{child.last_restart_s:.1f} s after it died")
            return True
        if proc.proc.poll() is not None:
            return self._died(child, f"{describe_exit(proc.proc.returncode)} before SERVING", now)
        if now - child.launched_at > proc.start_timeout_s:
            proc.kill()
            return self._died(child, f"not SERVING after {proc.start_timeout_s:.0f} s", now)
        return False

    def _died(self, child: _Child, reason: str, now: float) -> bool:
        proc = child.proc
        proc.kill_group()  # whatever it started goes with it
        child.last_exit = reason
        if child.phase == "serving":  # a failed restart keeps the first death's time: restart_s spans both
            child.died_at = now
        self.log(f"starmesh | {proc.name} (pid {proc.pid}) died: {reason}")
        cfg = self.config
        if child.phase == "serving" and now - child.up_since >= cfg.stable_s:
            child.num_consecutive = 0
        delay = backoff_s(cfg, child.num_consecutive)
        child.num_consecutive += 1
        child.deaths.append(now)
        while child.deaths and now - child.deaths[0] > cfg.crash_loop_window_s:
            child.deaths.popleft()
        if len(child.deaths) >= cfg.crash_loop_restarts and not child.is_crash_loop:
            child.is_crash_loop = True
            self.log(f"starmesh | CRASH LOOP: {proc.name} died {len(child.deaths)} times within "
                     f"{cfg.crash_loop_window_s:.0f} s (last: {reason}); still restarting, at most every "
                     f"{cfg.backoff_max_s:.1f} s")
        child.phase, child.next_start = "backoff", now + delay
        self.log(f"starmesh | restarting {proc.name} in {delay:.2f} s")
        return True
