"""The server base in-process: health, reflection, Describe, limits, graceful stop."""
from __future__ import annotations

import threading

import grpc
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from runtime.grpc_status import map_errors, status_code
from runtime.items import NodeError, NodeOutput, OpenNode
from runtime.server import ServerConfig
from tests.fixtures.components import Echo, Slow, inline_ref, inline_tensor
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from core.errors import BadTensorRef

pytestmark = pytest.mark.timeout(60)


def _health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_reflection_lists_component_health_and_reflection(echo_server):
    with grpc.insecure_channel(echo_server.address) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"starmesh.v1.Component", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services


def test_describe(echo_server):
    info = describe(echo_server.address)
    transport = echo_server.hosted.transport
    assert (info.name, list(info.nodes), info.host_id) == ("echo", ["echo"], "test-host")
    assert info.arena == transport.arena_name and info.version
    assert info.transport.arena_bytes == transport.config.arena_bytes


def test_health_turns_serving_when_ready():
    from runtime.background import BackgroundServer
    from runtime.component_service import ComponentService
    from transport.config import TransportConfig
    from transport.transport import Transport

    component = Echo()
    component.is_ready = False
    hosted = ComponentService(component, Transport(TransportConfig(host_id="test-host")))
    server = BackgroundServer(hosted, ServerConfig(ready_poll_s=0.01))
    try:
        server.start(wait_serving=False)
        for name in ("", "starmesh.v1.Component"):
            assert _health(server.address, name) == health_pb2.HealthCheckResponse.NOT_SERVING
        component.is_ready = True
        assert wait_until(lambda: _health(server.address) == health_pb2.HealthCheckResponse.SERVING, timeout_s=30)
    finally:
        server.stop()
    assert component.is_closed and hosted.transport.is_closed


def test_messages_above_4_mib_pass(echo_server):
    big = torch.arange(2 << 20, dtype=torch.float32)  # 8 MiB inline each way
    with RunStream(echo_server.address) as stream:
        stream.send(OpenNode(request_id="big", node="echo", inputs={"x": inline_ref(big)}))
        out, _done = stream.events()
        assert out.tensors["x"].kind == "shm"  # 8 MiB is above the inline threshold
        assert out.tensors["x"].nbytes == big.numel() * 4


class _Held(Slow):
    """Slow whose due results wait for `release`: the test decides when in-flight work ends."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def step(self):
        if not self.release.wait(0.005):  # the pace of Slow.step while held
            return []
        return super().step()


def test_graceful_stop_drains_in_flight_work():
    component = _Held()
    # A grace far beyond the stopper's join below: stop() can only have returned because
    # the in-flight work drained, never because the grace period ran out.
    server = start_in_process(component, grace_s=600)
    stream = RunStream(server.address)
    try:
        stream.send(OpenNode(request_id="slow", node="echo", inputs={"x": inline_ref(torch.ones(2))}))
        assert wait_until(lambda: describe(server.address).num_open_requests == 1)
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        # "slow" is held, so the stop stays in its drain: health turned NOT_SERVING first
        assert wait_until(lambda: _health(server.address) == health_pb2.HealthCheckResponse.NOT_SERVING,
                          timeout_s=30)
        stream.send(OpenNode(request_id="late", node="echo", inputs={"x": inline_ref(torch.ones(2))}))
        events = stream.events()  # the late request's refusal, while "slow" is still held
        component.release.set()
        events += stream.events()
        late = [e for e in events if isinstance(e, NodeError)]
        assert [(e.request_id, e.status) for e in late] == [("late", "UNAVAILABLE")]
        (out,) = [e for e in events if isinstance(e, NodeOutput)]
        assert out.request_id == "slow" and torch.equal(inline_tensor(out.tensors["x"]), torch.ones(2))
        stopper.join(30)
        assert not stopper.is_alive()  # returned once drained, well inside its 600 s grace
        assert stream.recv() is None  # the idle stream was cancelled after the drain
    finally:
        component.release.set()
        stream.close()
        server.stop()


def test_server_config_is_validated():
    with pytest.raises(ValueError, match="max_message_bytes"):
        ServerConfig(max_message_bytes=1024)
    with pytest.raises(ValueError, match="port"):
        ServerConfig(port=70000)
    with pytest.raises(ValueError, match="torch_threads"):
        ServerConfig(torch_threads=0)
    for bad in (-1, 20, True, 2.0):
        with pytest.raises(ValueError, match=r"server.nice must be an int in \[0, 19\]"):
            ServerConfig(nice=bad)


class _Context:
    """The status a handler ended with: set, and the handler returns (no abort raised)."""

    def __init__(self):
        self.code, self.details = None, None

    def set_code(self, code):
        self.code = code

    def set_details(self, details):
        self.details = details

    @property
    def status(self):
        return self.code, self.details


def test_error_mapping_decorator():
    import asyncio

    class Servicer:
        @map_errors
        async def unary(self, request, context):
            raise BadTensorRef("items[0].open.inputs[x].dtype: unknown")

        @map_errors
        async def stream(self, request, context):
            yield 1
            raise RuntimeError("boom")

    async def run():
        ctx = _Context()
        assert await Servicer().unary(None, ctx) is None
        assert ctx.status == (grpc.StatusCode.INVALID_ARGUMENT, "items[0].open.inputs[x].dtype: unknown")
        ctx = _Context()
        got = [x async for x in Servicer().stream(None, ctx)]
        assert got == [1] and ctx.code == grpc.StatusCode.INTERNAL and "boom" in ctx.details

    asyncio.run(run())
    assert status_code("NOT_FOUND") == grpc.StatusCode.NOT_FOUND
    assert status_code("NOPE") == grpc.StatusCode.INTERNAL
