"""`starmesh up` as a subprocess, as users run it, for benchmarks and tests that kill
its children: the endpoints it prints, its supervisor's published view (pids, restarts;
cluster.supervision_file), and SIGKILL to one child or to `up` itself.

    up = UpProcess(deployment_path).start()
    pid = up.kill_child("talker")                 # SIGKILL; returns the killed pid
    up.wait_restarted("talker", restarts=1)       # its supervisor entry once serving again
    up.stop()                                     # SIGTERM: a clean stop
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from cluster import supervision_file

READY_LINE = "Ctrl-C stops everything"


class UpProcess:
    """cache_dir: STARMESH_CACHE for `up` (default: this process's cache root, where the
    compiled CPU kernels are: a fresh cache makes every service build them again)."""

    def __init__(self, deployment: str | Path, cache_dir: str | Path | None = None,
                 args: tuple[str, ...] = ("--no-trace-store",), start_timeout_s: float = 300.0) -> None:
        self.deployment = str(deployment)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.cmd = [sys.executable, "-m", "cli", "up", "--deployment", self.deployment, *args]
        self.start_timeout_s = start_timeout_s
        self.lines: list[str] = []  # everything `up` printed (its children's lines prefixed with their names)
        self.endpoints: dict[str, str] = {}  # conductor and services: name -> HOST:PORT
        self.gateway: str | None = None       # the HTTP gateway's URL, when the deployment names one
        self.proc: subprocess.Popen | None = None
        self._ready = threading.Event()

    @property
    def conductor(self) -> str:
        return self.endpoints["conductor"]

    def start(self) -> "UpProcess":
        env = {**os.environ, **({"STARMESH_CACHE": str(self.cache_dir)} if self.cache_dir else {})}
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True, name="up-stdout").start()  # a full pipe would stall `up`
        deadline = time.monotonic() + self.start_timeout_s
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("`starmesh up` did not come up:\n" + "\n".join(self.lines[-40:]))
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.rstrip()
            self.lines.append(line)
            fields = line.split()
            if not self._ready.is_set() and line.startswith("  ") and len(fields) > 1 and ":" in fields[1]:
                if fields[0] == "gateway":
                    self.gateway = fields[1]
                else:
                    self.endpoints[fields[0]] = fields[1]
            if READY_LINE in line:
                self._ready.set()

    @property
    def member_tls(self):
        """The runtime.tls.TlsConfig that reaches its services (a member's; None under mesh_tls: false)."""
        return supervision_file.member_tls_of(self.endpoints["conductor"], self.cache_dir)

    def supervision(self) -> dict[str, dict]:
        """name -> {pid, address, state, restarts, last_exit, is_crash_loop, last_restart_s}."""
        return supervision_file.read(self.endpoints["conductor"], self.cache_dir)

    def kill_child(self, name: str) -> int:
        pid = self.supervision()[name]["pid"]
        os.kill(pid, signal.SIGKILL)
        return pid

    def wait_restarted(self, name: str, restarts: int, timeout_s: float = 120.0) -> dict:
        """The child's supervisor entry once it restarted `restarts` times in all and serves."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            entry = self.supervision().get(name, {})
            if entry.get("restarts", 0) >= restarts and entry.get("state") == "serving":
                return entry
            time.sleep(0.05)
        raise TimeoutError(f"{name} not restarted {restarts} times after {timeout_s} s:\n" + "\n".join(self.lines[-30:]))

    def kill(self) -> None:
        """SIGKILL to `up` itself: nothing of it runs any more (its children die with it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        if self.endpoints:  # the file it could not remove
            supervision_file.unpublish(self.endpoints["conductor"], self.cache_dir)

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM: `up` stops every child cleanly; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode
