"""A service replica as a child process (`starmesh serve ...`), started and stopped cleanly.

Used by `starmesh up` (cluster.launcher), the benchmarks and end-to-end tests:

    with ServiceProcess("module:factory", ["--host-id", "a"]) as svc:
        ... svc.address ...

The child writes its bound port to a file once SERVING (write_port_file, through
`--port-file`); the parent polls for that file (ServiceProcess.wait_serving, or
is_serving without blocking). `die_with_parent` (what `starmesh up` uses) tethers the
child to this process (runtime.parent_death) and runs it in its own process group,
which stop() kills, so that nothing it started outlives it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from runtime.parent_death import tethered


class ServiceProcess:
    """`log` (a callable taking one line) gets the process's stdout and stderr, each line
    prefixed with its name; without it the child writes to ours directly. `command` is
    the starmesh subcommand (`serve`, or `conductor` with the deployment as `component`'s
    place taken by args). `die_with_parent`: module docstring; then launch() only from
    the main thread or a thread that outlives the child."""

    def __init__(self, component: str, args: list[str] = (), env: dict[str, str] | None = None,
                 name: str | None = None, start_timeout_s: float = 60.0, port: int = 0,
                 command: str = "serve", log=None, die_with_parent: bool = False,
                 host: str = "127.0.0.1") -> None:
        """host: the address it binds (`--host` when not the default 127.0.0.1)."""
        self.component = component
        self.host = host
        self.die_with_parent = die_with_parent
        self.command = command
        self.log = log
        self._reader: threading.Thread | None = None
        self._terminated = False
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.name = name or component.rsplit(":", 1)[-1]
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.port: int | None = port or None  # kept across restarts: clients reconnect to it
        self._tmp = tempfile.TemporaryDirectory(prefix="starmesh-proc-")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self) -> "ServiceProcess":
        """Starts the process and waits until it is SERVING (its port file appears)."""
        return self.launch().wait_serving()

    def launch(self) -> "ServiceProcess":
        """Starts the process without waiting (several start in parallel, then wait_serving)."""
        port_file = os.path.join(self._tmp.name, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        self._terminated = False
        target = [self.component] if self.component else []
        cmd = [sys.executable, "-m", "cli", self.command, *target, "--port", str(self.port or 0),
               "--port-file", port_file, *(("--host", self.host) if self.host != "127.0.0.1" else ()), *self.args]
        self._cmd = cmd
        # process_group=0: the child leads a group of its own (what stop() kills), and a
        # Ctrl-C at the terminal reaches only the parent, which stops children in order
        extra = {"process_group": 0} if self.die_with_parent else {}
        if self.die_with_parent:
            cmd = tethered(cmd)
        if self.log is None:
            self.proc = subprocess.Popen(cmd, env=self.env, **extra)
        else:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True, bufsize=1, **extra)
            self._reader = threading.Thread(target=self._relay, args=(self.proc,), daemon=True,
                                            name=f"log-{self.name}")
            self._reader.start()
        return self

    def _relay(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.log(f"{self.name} | {line.rstrip()}")

    def wait_serving(self) -> "ServiceProcess":
        deadline = time.monotonic() + self.start_timeout_s
        while not self.is_serving():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before SERVING: {self._cmd}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{self.name} not SERVING after {self.start_timeout_s}s")
            time.sleep(0.05)
        return self

    def is_serving(self) -> bool:
        """True once the launched child wrote its port file (self.port is then its port)."""
        port_file = os.path.join(self._tmp.name, "port")
        if not os.path.exists(port_file):
            return False
        with open(port_file) as f:
            self.port = int(f.read())
        return True

    def terminate(self) -> None:
        """Sends SIGTERM once: a second one during the graceful stop would kill the
        process before it unlinks its arena."""
        if self.proc is not None and self.proc.poll() is None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (graceful: drain, unlink the arena), then SIGKILL after `timeout_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.terminate()
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.kill_group()
        return rc

    def kill_group(self) -> None:
        """SIGKILL to whatever the child left in its process group (its own children)."""
        if self.die_with_parent:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass  # the group is empty: nothing was left

    def kill(self) -> None:
        """SIGKILL: the crash case (its segment stays until the next start sweeps it)."""
        self.proc.kill()
        self.proc.wait()
        self.kill_group()

    def __enter__(self) -> "ServiceProcess":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
        self._tmp.cleanup()


def write_port_file(path: str, port: int) -> None:
    """The child's half of the handshake: atomic, so a parent polling for the file never
    reads it half-written."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".port-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
