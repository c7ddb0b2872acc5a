"""`starmesh trace` over a trace store in this process: the store `starmesh up` publishes
under the cache root is the default, its per-edge rows come back over HTTP, and the
demo's wait for a request's edges ends empty-handed when none arrive."""
from __future__ import annotations

import contextlib
import io
import json
import socket

import pytest

from cli.main import main
from cluster.stack import publish_trace_store, published_trace_store, unpublish_trace_store
from cluster.trace_store import REQUEST_ATTR, TraceStore, fetch_request, wait_for_edges

pytestmark = pytest.mark.timeout(60)


def _edge_span(request_id: str, edge: str, latency_us: float) -> dict:
    return {"trace_id": "ab" * 16, "span_id": f"{int(latency_us):016x}", "parent_id": "", "name": f"edge {edge}",
            "service": "conductor", "start_ns": 0, "end_ns": 1,
            "attributes": {REQUEST_ATTR: request_id, "starmesh.items": 2, "starmesh.bytes": 64,
                           "starmesh.latency_us": latency_us, "starmesh.transport": "shm"}}


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("STARMESH_CACHE", str(tmp_path / "cache"))
    store = TraceStore().start()
    yield store
    store.stop()
    unpublish_trace_store()


def _trace(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["trace", *argv])
    return code, out.getvalue()


def test_the_published_store_is_the_default(store):
    assert published_trace_store() is None
    assert _trace("r1")[0] == 2  # no store to read
    publish_trace_store(store.http_address)
    assert published_trace_store() == store.http_address
    store.add([_edge_span("r1", "thinker.text->talker.text", 300.0), _edge_span("r1", "thinker.text->talker.text", 100.0)])
    code, out = _trace("r1", "--json")
    assert code == 0, out
    rows = json.loads(out)["edges"]
    assert [(r["edge"], r["items"], r["bytes"], r["max_us"]) for r in rows] == [
        ("thinker.text->talker.text", 4, 128, 300.0)]
    assert fetch_request(store.http_address, "r1")["trace_ids"] == ["ab" * 16]
    unpublish_trace_store()
    assert published_trace_store() is None


def test_a_request_without_spans_is_reported(store):
    code, _ = _trace("nobody", "--store", store.http_address)
    assert code == 1
    assert wait_for_edges(store, "nobody", timeout_s=0.3) == []


def test_an_unreachable_store_is_exit_2():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _trace("r1", "--store", f"http://127.0.0.1:{port}")[0] == 2
