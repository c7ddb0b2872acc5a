"""Arize Phoenix as the tracing UI of `starmesh up --trace-ui`: an OTLP receiver and a
web UI on localhost, with no Docker.

    ui = start_trace_ui()      # installs once, starts, waits, sets OTEL_EXPORTER_OTLP_ENDPOINT
    ... start the cluster (its processes inherit the endpoint) ...
    ui.stop()                  # after the cluster: the services flush their spans as they stop

Phoenix is installed from PyPI into a virtual environment of its own
($STARMESH_PHOENIX_VENV, default $STARMESH_CACHE/phoenix-venv) so that its many pins
can never move the project's packages; the install runs once (a marker file is written
only when pip succeeded, under an flock so two `starmesh up` install once). It listens
on Phoenix's own defaults, UI + OTLP/HTTP on 6006 and OTLP/gRPC on 4317, or on
PHOENIX_PORT / PHOENIX_GRPC_PORT when set, bound to 127.0.0.1 (Phoenix binds 0.0.0.0
by default), and keeps its data in $STARMESH_CACHE/phoenix unless PHOENIX_WORKING_DIR
says otherwise. The REST API (`GET /v1/projects/default/spans`) serves the spans back.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from core.cache_root import cache_root
from runtime.parent_death import tethered

PACKAGE = "arize-phoenix"
UI_PORT, GRPC_PORT = 6006, 4317          # Phoenix's defaults (PHOENIX_PORT, PHOENIX_GRPC_PORT)
VENV_ENV = "STARMESH_PHOENIX_VENV"
MARKER = ".starmesh-installed"           # written last: a half-done install is redone
PROJECT = "default"                      # spans without an openinference.project.name land here


def venv_dir() -> Path:
    return Path(os.environ.get(VENV_ENV) or cache_root() / "phoenix-venv")


def is_installed(venv: Path | None = None) -> bool:
    venv = venv or venv_dir()
    return (venv / MARKER).is_file() and (venv / "bin" / "phoenix").is_file()


def install(venv: Path | None = None, log=print) -> Path:
    """Creates the virtual environment and pip-installs Phoenix into it, once; pip's own
    progress goes to our stdout. Returns the venv."""
    venv = venv or venv_dir()
    if is_installed(venv):
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_installed(venv):  # installed by another process while we waited
            return venv
        log(f"installing Arize Phoenix into {venv} (first use only; a few hundred MB, minutes) ...")
        t0 = time.perf_counter()
        # sys.executable may itself be a venv's: `-m venv` builds on its base interpreter.
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                        "--progress-bar", "on", PACKAGE], check=True)
        version = subprocess.run([str(venv / "bin" / "python"), "-c",
                                  "from importlib.metadata import version; print(version('arize-phoenix'))"],
                                 check=True, capture_output=True, text=True).stdout.strip()
        (venv / MARKER).write_text(f"{PACKAGE}=={version}\n")
        log(f"installed {PACKAGE} {version} in {time.perf_counter() - t0:.0f} s")
    return venv


class Phoenix:
    """One `phoenix serve` child process; its output goes to WORKING_DIR/phoenix.log."""

    def __init__(self, venv: Path | None = None, host: str = "127.0.0.1", ui_port: int | None = None,
                 grpc_port: int | None = None, working_dir: str | Path | None = None, log=print) -> None:
        self.venv = venv or venv_dir()
        self.host = host
        self.ui_port = ui_port or int(os.environ.get("PHOENIX_PORT") or UI_PORT)
        self.grpc_port = grpc_port or int(os.environ.get("PHOENIX_GRPC_PORT") or GRPC_PORT)
        self.working_dir = Path(working_dir or os.environ.get("PHOENIX_WORKING_DIR") or cache_root() / "phoenix")
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The web UI, and the base of the REST API (/v1/...)."""
        return f"http://{self.host}:{self.ui_port}"

    @property
    def otlp_endpoint(self) -> str:
        """For OTEL_EXPORTER_OTLP_ENDPOINT (OTLP/gRPC; http:// means no TLS)."""
        return f"http://{self.host}:{self.grpc_port}"

    @property
    def log_path(self) -> Path:
        return self.working_dir / "phoenix.log"

    def start(self, timeout_s: float = 180.0) -> "Phoenix":
        if not is_installed(self.venv):
            raise RuntimeError(f"Phoenix is not installed in {self.venv} (cluster.phoenix.install)")
        for port in (self.ui_port, self.grpc_port):
            if _answers(self.host, port):  # Phoenix would fail later, with a less clear message
                raise RuntimeError(f"port {port} on {self.host} is taken (another collector?): "
                                   "set PHOENIX_PORT / PHOENIX_GRPC_PORT")
        self.working_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PHOENIX_HOST": self.host, "PHOENIX_PORT": str(self.ui_port),
               "PHOENIX_GRPC_PORT": str(self.grpc_port), "PHOENIX_WORKING_DIR": str(self.working_dir),
               "PHOENIX_TELEMETRY_ENABLED": "false"}
        env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)  # Phoenix must not trace itself into itself
        with open(self.log_path, "ab") as out:
            # Own session: Ctrl-C in the terminal reaches `starmesh up` only, which stops
            # Phoenix last, after the services have flushed their spans into it. Tethered:
            # it dies with this process, even when that is SIGKILLed.
            cmd = tethered([str(self.venv / "bin" / "phoenix"), "serve"])
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        """Until the UI answers /healthz and the OTLP/gRPC port accepts connections."""
        t0 = time.monotonic()
        self.log(f"starting Phoenix (log: {self.log_path}) ...")
        while not (_http_ok(f"{self.url}/healthz") and _answers(self.host, self.grpc_port)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"Phoenix exited with {self.proc.returncode}:\n{self._log_tail()}")
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"Phoenix not answering on {self.url} after {timeout_s:.0f} s:\n{self._log_tail()}")
            time.sleep(0.5)
        self.log(f"Phoenix up in {time.monotonic() - t0:.1f} s: UI {self.url}, OTLP {self.otlp_endpoint}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def spans(self, **query) -> list[dict]:
        """Spans of the default project through the REST API, every page; `query` holds its
        filters (trace_id=[...], name=[...], attribute=["key:value"], ...)."""
        out, cursor = [], None
        while True:
            params = {**query, "limit": 1000, **({"cursor": cursor} if cursor else {})}
            url = f"{self.url}/v1/projects/{PROJECT}/spans?{urllib.parse.urlencode(params, doseq=True)}"
            with urllib.request.urlopen(url, timeout=30) as reply:
                page = json.load(reply)
            out += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (uvicorn shuts down cleanly), SIGKILL after `timeout_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "Phoenix":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_trace_ui(log=print) -> Phoenix:
    """For `starmesh up --trace-ui`: installs Phoenix if needed, starts it, and points this
    process's environment (which the cluster's processes inherit) at it, unless
    OTEL_EXPORTER_OTLP_ENDPOINT already names another collector."""
    install(log=log)
    ui = Phoenix(log=log).start()
    current = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if current and current != ui.otlp_endpoint:
        log(f"OTEL_EXPORTER_OTLP_ENDPOINT is {current}: spans go there, not to Phoenix")
    else:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = ui.otlp_endpoint
    return ui


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False
