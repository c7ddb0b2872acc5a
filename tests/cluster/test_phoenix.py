"""`starmesh up --trace-ui`: Arize Phoenix receives the cluster's spans, and one request's
edge spans are read back through Phoenix's REST API, the same spans the local trace
store holds.

The Phoenix test runs only where Phoenix is already installed in its virtual environment
(`starmesh up --trace-ui` installs it on first use, or cluster.phoenix.install()); the
default test run never installs it: it is hundreds of MB from PyPI. The start/stop and
environment logic is also checked against a stand-in `phoenix` executable, always.
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

import pytest

from client.speech import speak
from cluster.launcher import Cluster, free_port
from cluster.phoenix import MARKER, Phoenix, is_installed, start_trace_ui, venv_dir
from cluster.launchable import read_launchable
from cluster.trace_store import TraceStore
from engine.models.qwen3_omni.tiny import chat_prompt
from cluster.shipped_deployments import rewrite_shipped
from tests.fixtures.services import wait_until

pytestmark = pytest.mark.timeout(600)
needs_phoenix = pytest.mark.skipif(not is_installed(), reason=f"Arize Phoenix is not installed in {venv_dir()} "
                                   "(`starmesh up --trace-ui` installs it; the default test run does not)")
REQUEST = "phoenix-edges-1"


@pytest.fixture
def trace_ui(tmp_path, monkeypatch):
    """Phoenix started the way `starmesh up --trace-ui` starts it, on free ports."""
    monkeypatch.setenv("PHOENIX_PORT", str(free_port()))
    monkeypatch.setenv("PHOENIX_GRPC_PORT", str(free_port()))
    monkeypatch.setenv("PHOENIX_WORKING_DIR", str(tmp_path / "phoenix"))
    # recorded first, so that the endpoint start_trace_ui sets in os.environ is undone after
    # the test (children of later tests would export to this stopped Phoenix otherwise)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    ui = start_trace_ui(log=lambda msg: None)
    try:
        yield ui
    finally:
        ui.stop()
    assert ui.proc.poll() is not None


def _edges_in_phoenix(ui, want: set[str]) -> list[dict]:
    """The request's spans in Phoenix once all of `want` (span ids) have been ingested
    (Phoenix inserts received spans in batches, a little after the export)."""
    found: list[dict] = []

    def arrived() -> bool:
        found[:] = ui.spans(attribute=[f'starmesh.request_id:"{REQUEST}"'])
        if want <= {s["context"]["span_id"] for s in found}:
            return True
        time.sleep(0.5)
        return False

    assert wait_until(arrived, 60), f"Phoenix has {len(found)} spans of {REQUEST}, not all of {sorted(want)}"
    return found


@needs_phoenix
def test_edge_spans_read_back_through_phoenix(trace_ui, tiny_omni, tmp_path):
    assert os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] == trace_ui.otlp_endpoint  # every process inherits it
    store = TraceStore().start()
    try:
        path = rewrite_shipped("local", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path))
        with Cluster(read_launchable(path), path, trace_store=store.otlp_address, log=lambda line: None) as c:
            asyncio.run(speak(c.conductor_address, "qwen3-omni", chat_prompt("Hello there"),
                              {"max_new_tokens": 8, "max_frames": 30}, request_id=REQUEST))
        # every process has stopped, so flushed its spans to both the store and Phoenix
        assert wait_until(lambda: any(s["name"].startswith("edge ") for s in store.request(REQUEST)["spans"]), 10)
        local = {s["span_id"]: s for s in store.request(REQUEST)["spans"] if s["name"].startswith("edge ")}
    finally:
        store.stop()
    phoenix = {s["context"]["span_id"]: s for s in _edges_in_phoenix(trace_ui, set(local))}
    assert {s["context"]["trace_id"] for s in phoenix.values()} == {s["trace_id"] for s in local.values()}
    assert len({s["trace_id"] for s in local.values()}) == 1
    assert {"talker.codes -> code2wav.codes", "decode.embeds -> talker.embeds"} <= {
        s["name"][len("edge "):] for s in local.values()}
    for span_id, span in local.items():
        seen = phoenix[span_id]
        assert seen["name"] == span["name"]
        assert seen["parent_id"] == span["parent_id"]
        for key in ("starmesh.items", "starmesh.latency_us", "starmesh.latency_us.p50"):
            if key in span["attributes"]:
                assert seen["attributes"][key] == pytest.approx(span["attributes"][key]), (span["name"], key)


STAND_IN = """#!{python}
# Stands in for `phoenix serve`: /healthz on PHOENIX_PORT, a listener on PHOENIX_GRPC_PORT.
import http.server, os, socket
host = os.environ["PHOENIX_HOST"]
grpc = socket.create_server((host, int(os.environ["PHOENIX_GRPC_PORT"])))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
http.server.HTTPServer((host, int(os.environ["PHOENIX_PORT"])), Health).serve_forever()
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A virtual environment whose `phoenix` is the stand-in above, marked installed."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "phoenix"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("STARMESH_PHOENIX_VENV", str(venv))
    assert not is_installed()  # no marker: a half-done install is redone
    (venv / MARKER).write_text("arize-phoenix==0\n")
    assert is_installed()
    return venv


def test_trace_ui_points_every_process_at_phoenix_and_stops(stand_in, trace_ui):
    assert os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://127.0.0.1:{os.environ['PHOENIX_GRPC_PORT']}"
    assert trace_ui.url == f"http://127.0.0.1:{os.environ['PHOENIX_PORT']}"
    trace_ui.stop()
    assert trace_ui.proc.poll() is not None


def test_trace_ui_keeps_another_collector(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://jaeger:4317")
    monkeypatch.setenv("PHOENIX_PORT", str(free_port()))
    monkeypatch.setenv("PHOENIX_GRPC_PORT", str(free_port()))
    monkeypatch.setenv("PHOENIX_WORKING_DIR", str(tmp_path / "phoenix"))
    lines = []
    ui = start_trace_ui(log=lines.append)
    ui.stop()
    assert os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4317"
    assert any("spans go there, not to Phoenix" in line for line in lines)


def test_a_taken_port_is_named(stand_in, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        ui = Phoenix(ui_port=free_port(), grpc_port=port, working_dir=tmp_path, log=lambda msg: None)
        with pytest.raises(RuntimeError, match=f"port {port} .* is taken"):
            ui.start()
    assert ui.proc is None
