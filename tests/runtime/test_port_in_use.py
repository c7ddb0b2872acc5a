"""A port another process listens on is an error at start, naming the address, for each
server a starmesh process binds: the gRPC server (no SO_REUSEPORT: two servers never
share a port), Prometheus /metrics, and the trace store's OTLP and query ports."""
from __future__ import annotations

import socket

import pytest

from cluster.trace_store import TraceStore
from runtime.metrics import serve_metrics
from tests.fixtures.components import Echo
from tests.fixtures.services import start_in_process

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def held_port():
    """A port a plain socket listens on (what an orphaned process would hold)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_second_grpc_server_on_a_port_fails_naming_it():
    first = start_in_process(Echo())
    try:
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{first.port}"):
            start_in_process(Echo(), port=first.port)
    finally:
        first.stop()


def test_metrics_on_a_held_port_fails_naming_it(held_port):
    from prometheus_client import CollectorRegistry

    with pytest.raises(OSError, match=f"metrics: could not bind 127.0.0.1:{held_port}"):
        serve_metrics(held_port, CollectorRegistry())


@pytest.mark.parametrize("which", ["otlp_port", "http_port"])
def test_trace_store_on_a_held_port_fails_naming_it(held_port, which):
    with pytest.raises(OSError, match=f"127.0.0.1:{held_port}"):
        TraceStore(**{which: held_port})
