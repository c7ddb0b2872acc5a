"""A load-generator child process driven over pipes: one JSON command per stdin line,
one JSON answer per stdout line (bench.conductor_client, bench.speech_client).

The child prints {"ready": true} once it can take commands and exits at EOF on stdin.
Load generators run apart from the bench's process so that its CPU time (and GIL) stays
the conductor's.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys


class PipeChild:
    def __init__(self, module: str, args: tuple[str, ...] = (), what: str = "") -> None:
        """Starts `python -m module *args` and waits for its ready line; `what` names it
        in errors (default: the module)."""
        self.what = what or module
        self.proc = subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            self.close()
            raise RuntimeError(f"{self.what} did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, cmd: dict, during: str = "a command") -> dict:
        """Sends one command and returns its answer; a child that exits meanwhile is an error."""
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.what} exited during {during}")
        return json.loads(line)

    def close(self, timeout_s: float = 10.0) -> None:
        """EOF on its stdin, then a kill if it does not exit within timeout_s."""
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
