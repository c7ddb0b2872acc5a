"""Watches a deployment's child processes and restarts the ones that die.

    supervisor = Supervisor(SupervisorConfig(), log)
    supervisor.watch(proc, probe)   # a ServiceProcess that is SERVING, its LivenessProbe (or None)
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

A child that still runs but no longer answers is hung (stopped, its event loop stuck): a
child with a probe (cluster.liveness_probe: a gRPC health Check of its liveness name) is
probed every `probe_period_s`, each Check with `probe_timeout_s`, and `probe_failures`
misses in a row kill it (SIGKILL to its group) and restart it as a death, as a Kubernetes
liveness probe would. A child is probed from the moment it serves; it is judged once some
probe of its kind (the same credentials) got an answer from any child (a probe that
reaches no one is a configuration fault, not a hang). The Check is answered off the
child's engine thread, so a long engine step or a loaded machine is no miss; the
defaults convict after about nine seconds without an answer.

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

from cluster.liveness_probe import LivenessProbe
from runtime.process import ServiceProcess


@dataclass(frozen=True)
class SupervisorConfig:
    backoff_base_s: float = 0.5
    backoff_max_s: float = 10.0
    stable_s: float = 30.0
    crash_loop_restarts: int = 5
    crash_loop_window_s: float = 60.0
    poll_s: float = 0.05
    probe_period_s: float = 2.0
    probe_timeout_s: float = 3.0
    probe_failures: int = 3  # misses in a row that kill a child; 0: children are not probed

    def __post_init__(self) -> None:
        for name in ("backoff_base_s", "stable_s", "crash_loop_window_s", "poll_s", "probe_period_s",
                     "probe_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"supervision.{name} must be > 0, got {getattr(self, name)}")
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError(f"supervision.backoff_max_s must be >= backoff_base_s ({self.backoff_base_s}), "
                             f"got {self.backoff_max_s}")
        if self.crash_loop_restarts < 1:
            raise ValueError(f"supervision.crash_loop_restarts must be >= 1, got {self.crash_loop_restarts}")
        if isinstance(self.probe_failures, bool) or not isinstance(self.probe_failures, int) \
                or self.probe_failures < 0:
            raise ValueError(f"supervision.probe_failures must be an integer >= 0, got {self.probe_failures!r}")


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
    probe: LivenessProbe | None = None
    next_probe: float = 0.0
    num_answered: int = 0  # probes answered since it last started serving
    num_misses: int = 0    # probes missed in a row

    def status(self) -> dict:
        return {"pid": self.proc.proc.pid if self.proc.proc else None, "address": self.proc.address,
                "state": self.phase, "restarts": self.num_restarts, "last_exit": self.last_exit,
                "is_crash_loop": self.is_crash_loop, "last_restart_s": self.last_restart_s,
                "probes_answered": self.num_answered, "probes_missed": self.num_misses}


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
        self._reached: set[tuple] = set()  # kinds of probe (LivenessProbe.kind) that got an answer
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="supervisor")

    def watch(self, proc: ServiceProcess, probe: LivenessProbe | None = None) -> None:
        """Supervises `proc` (SERVING); `probe`: how to ask whether it still answers (None:
        it is watched for its exit only)."""
        with self._lock:
            child = self._children[proc.name] = _Child(proc, probe=probe)
            self._serving(child, time.monotonic())

    def start(self) -> "Supervisor":
        self._thread.start()
        self._changed()
        return self

    def status(self) -> dict[str, dict]:
        """name -> {pid, address, state, restarts, last_exit, is_crash_loop, last_restart_s,
        probes_answered, probes_missed}."""
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
        for child in self._children.values():
            if child.probe is not None:
                child.probe.reset()

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
            if self._probe(child, now):
                return True
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
            self._serving(child, now)
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

    def _serving(self, child: _Child, now: float) -> None:
        child.phase, child.up_since = "serving", now
        child.num_answered = child.num_misses = 0
        child.next_probe = now  # probed at once: a hang right after the start is judged too
        if child.probe is not None:
            child.probe.reset()  # a connection to the new process

    def _probe(self, child: _Child, now: float) -> bool:
        """Advances a serving child's liveness probe; True when it was convicted (killed,
        and its restart scheduled as after a death)."""
        cfg = self.config
        if child.probe is None or not cfg.probe_failures:
            return False
        answered = child.probe.poll()
        if answered is None:
            if now >= child.next_probe:
                child.probe.start(cfg.probe_timeout_s)
                child.next_probe = now + cfg.probe_period_s
            return False
        if answered:
            child.num_answered, child.num_misses = child.num_answered + 1, 0
            self._reached.add(child.probe.kind)
            return False
        child.num_misses += 1
        proc = child.proc
        if child.probe.kind not in self._reached:  # no probe like it ever got an answer: a fault of the probe
            if child.num_misses == cfg.probe_failures:
                self.log(f"starmesh | {proc.name} (pid {proc.pid}) never answered a health probe, nor did any "
                         f"process probed alike; not judged by them until one does (their address or TLS?)")
            return False
        self.log(f"starmesh | {proc.name} (pid {proc.pid}) did not answer its health probe within "
                 f"{cfg.probe_timeout_s:g} s ({child.num_misses}/{cfg.probe_failures})")
        if child.num_misses < cfg.probe_failures:
            return False
        proc.kill()
        return self._died(child, f"hung: no answer to {cfg.probe_failures} health probes in a row "
                                 f"({cfg.probe_timeout_s:g} s each), killed", now)

    def _died(self, child: _Child, reason: str, now: float) -> bool:
        proc = child.proc
        proc.kill_group()  # whatever it started goes with it
        if child.probe is not None:
            child.probe.reset()
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
