"""A full arena waits a bounded time, then the request gets RESOURCE_EXHAUSTED;
the service stays up and serves again once a consumer acknowledges."""
import time

import pytest
import torch

from runtime.items import NodeError, NodeOutput, OpenNode, Release
from tests.fixtures.components import Echo, inline_ref
from tests.fixtures.services import RunStream, start_in_process
from transport.config import TransportConfig


@pytest.fixture
def small_arena_server():
    config = TransportConfig(host_id="test-host", inline_threshold=0, arena_bytes=1 << 20, full_wait_s=0.3)
    server = start_in_process(Echo(), transport_config=config)
    yield server
    server.stop()


def _open(stream, rid):
    x = torch.ones(150_000)  # 600 kB: two do not fit in a 1 MiB arena
    stream.send(OpenNode(rid, "echo", inputs={"x": inline_ref(x)}, consumer_host_ids=("test-host",)))
    return stream.events(timeout_s=5)  # output and done, or the error, arrive in one message


def test_full_arena_gives_resource_exhausted_then_recovers(small_arena_server):
    with RunStream(small_arena_server.address) as stream:
        first = [e for e in _open(stream, "a") if isinstance(e, NodeOutput)][0]
        t0 = time.monotonic()
        errors = [e for e in _open(stream, "b") if isinstance(e, NodeError)]
        waited = time.monotonic() - t0
        assert errors and errors[0].status == "RESOURCE_EXHAUSTED", errors
        assert "no room" in errors[0].message
        assert 0.25 < waited < 3.0  # bounded wait, not an immediate failure or a hang
        stream.send(Release("a", (first.tensors["x"].lease_id,)))
        third = [e for e in _open(stream, "c") if isinstance(e, NodeOutput)][0]
        stream.send(Release("c", (third.tensors["x"].lease_id,)))
