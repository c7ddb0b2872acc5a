"""`starmesh up` of the default deployment as a user starts it, for tests that then use it
as a user does: the session's `local_up` (tests/cluster/local_up.py), which the README's
examples run against (tests/e2e/test_readme_examples.py).

The shipped compose/deployments/local.yaml, every address moved to a free port (so it runs
beside anything else on the machine) and nothing else changed: its tiny checkpoints are
built on first use into the run's own cache, which shares only the compiled CPU kernels
with the machine's cache (built once per machine, as scripts/setup.sh does). Everything
`up` and its children print is collected by a reader thread (a full pipe would stall
them) and checked at the stop.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fixtures.processes import printed_endpoints

READY = "Ctrl-C stops everything"
# A stop that ends normally prints neither; a real failure prints one with its cause.
TROUBLE = re.compile(r"\bERROR\b|Traceback \(most recent call last\)")


@dataclass
class Output:
    """The lines a process prints, read on a thread as they come."""

    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reader = threading.Thread(target=self._read, daemon=True, name=f"output-{self.proc.pid}")
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout_s: float) -> list[str]:
        """The lines up to the first containing `text` (AssertionError if the process ends
        or timeout_s passes first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i, line in enumerate(list(self.lines)):
                if text in line:
                    return self.lines[:i + 1]
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"never printed {text!r}:\n" + "\n".join(self.lines[-40:]))

    def stop(self, sig: int, timeout_s: float = 120.0) -> str:
        """Sends `sig`, waits for the exit; everything printed, one string."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout_s)
        self.reader.join(10)
        return "\n".join(self.lines)


@dataclass
class DefaultUp:
    deployment: Path
    env: dict[str, str]        # what a user's shell has beside `up`: its cache (trace store), offline hub
    output: Output
    conductor: str = ""        # HOST:PORT
    gateway: str = ""          # HOST:PORT of the HTTP gateway
    services: dict[str, str] = field(default_factory=dict)  # service name -> its (first) gRPC address
    stopped: tuple[int, str] | None = None  # what stop() returned

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, str]:
        """(exit code, everything printed), the first call's for every call. SIGINT is
        Ctrl-C at the terminal: it reaches `up` alone (each child leads its own process group)."""
        if self.stopped is None:
            text = self.output.stop(sig)
            self.stopped = (self.output.proc.returncode, text)
        return self.stopped


def shipped_with_free_ports(directory: Path) -> Path:
    from cluster.deployment_dir import DEFAULT_DEPLOYMENT
    from cluster.shipped_deployments import with_free_ports, write_deployment
    from conductor.deployment_file import load_yaml

    return write_deployment(with_free_ports(load_yaml(DEFAULT_DEPLOYMENT)), str(directory))


def run_env(directory: Path) -> dict[str, str]:
    """A run's environment: its own cache (tiny checkpoints, the trace store's address,
    supervision), whose compiled kernels are the machine's."""
    from core.cache_root import cache_root

    kernels = cache_root() / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    cache = directory / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / "kernels").exists():
        (cache / "kernels").symlink_to(kernels, target_is_directory=True)
    return {**os.environ, "STARMESH_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}


def start_default_up(directory: Path, timeout_s: float = 400.0, options: tuple[str, ...] = ()) -> DefaultUp:
    """`starmesh up --deployment <the default, on free ports> [options]`, SERVING."""
    path = shipped_with_free_ports(directory)
    env = run_env(directory)
    proc = subprocess.Popen([sys.executable, "-m", "cli", "up", "--deployment", str(path), *options], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    up = DefaultUp(path, env, Output(proc))
    try:
        endpoints = printed_endpoints(up.output.wait_for(READY, timeout_s))
    except BaseException:
        up.stop(signal.SIGTERM)
        raise
    up.conductor = endpoints.pop("conductor")
    up.gateway = endpoints.pop("gateway").removeprefix("http://")
    up.services = endpoints
    return up


def trouble(text: str) -> list[str]:
    """The lines of `text` that say ERROR or start a traceback."""
    return [line for line in text.splitlines() if TROUBLE.search(line)]
