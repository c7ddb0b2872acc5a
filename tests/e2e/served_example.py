"""A documented command that starts a server (`starmesh serve`, `conductor`, `gateway`),
run as written: on a free port in place of the one it names (without `--port` it picks
its own and prints it), until it answers a probe; then SIGTERM stops it, and it must exit
0 without an ERROR or a traceback in what it printed."""
from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from tests.e2e.default_up import Output, trouble

LISTENING = re.compile(r"listening on (\S+:\d+)")
_ASSIGNMENTS = re.compile(r"^((?:\w+=\S*\s+)*)(.*)$", re.S)
SERVE_TIMEOUT_S = 180.0  # a tiny checkpoint loads in seconds: past this the server hangs


def is_server(command: str) -> bool:
    return re.search(r"\bstarmesh (serve|conductor|gateway)\b", command) is not None


def exec_form(command: str) -> str:
    """`VAR=x cmd ...` as `VAR=x exec cmd ...`: the shell becomes the server, so that a
    signal sent to the process reaches the server itself."""
    assignments, rest = _ASSIGNMENTS.match(command.strip()).groups()
    return f"{assignments}exec {rest}"


def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.2)


def serve_as_written(command: str, root: Path, env: dict[str, str], probe: Callable[[str], bool]) -> str:
    """Runs the server `command` in `root` until `probe(HOST:PORT)` holds, stops it with
    SIGTERM; everything it printed."""
    from cluster.launcher import free_ports

    port = free_ports(1)[0]
    command, named = re.subn(r"--port \d+", f"--port {port}", command)
    proc = subprocess.Popen(["bash", "-c", exec_form(command)], cwd=root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = Output(proc)
    try:
        if named:
            output.wait_for(f":{port}", SERVE_TIMEOUT_S)
            address = f"127.0.0.1:{port}"
        else:
            address = LISTENING.search(output.wait_for("listening on", SERVE_TIMEOUT_S)[-1]).group(1)
        until(lambda: probe(address), SERVE_TIMEOUT_S, f"{command} answering at {address}")
    finally:
        text = output.stop(signal.SIGTERM)
    assert proc.returncode == 0 and not trouble(text), f"{command}: exit {proc.returncode}\n{text[-4000:]}"
    return text


def grpc_serving(tls=None) -> Callable[[str], bool]:
    """A probe: the server's health ("" service) is SERVING."""
    from runtime.replica_probe import check_health

    return lambda address: check_health(address, timeout_s=5.0, tls=tls).is_serving


def http_healthy(address: str) -> bool:
    import httpx

    try:
        return httpx.get(f"http://{address}/health", timeout=30).status_code == 200
    except httpx.TransportError:
        return False
