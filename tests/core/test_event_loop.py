"""Every starmesh asyncio process runs the loop core.event_loop makes: uvloop by default,
asyncio's own on STARMESH_EVENT_LOOP=asyncio; anything else is refused, naming the variable."""
import asyncio

import grpc
import pytest

from core import event_loop


async def _which() -> str:
    await asyncio.sleep(0)
    return event_loop.name(asyncio.get_running_loop())


def test_uvloop_by_default(monkeypatch):
    monkeypatch.delenv(event_loop.VARIABLE, raising=False)
    assert event_loop.run(_which()) == "uvloop"
    monkeypatch.setenv(event_loop.VARIABLE, "")
    assert event_loop.run(_which()) == "uvloop"


def test_asyncio_on_request(monkeypatch):
    monkeypatch.setenv(event_loop.VARIABLE, "asyncio")
    assert event_loop.run(_which()) == "asyncio"
    loop = event_loop.new_event_loop()
    try:
        assert event_loop.name(loop) == "asyncio"
    finally:
        loop.close()


def test_an_unknown_loop_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(event_loop.VARIABLE, "trio")
    with pytest.raises(ValueError, match=r"STARMESH_EVENT_LOOP='trio': must be one of uvloop, asyncio"):
        event_loop.run(_which())


def test_an_in_process_service_serves_on_uvloop(monkeypatch):
    """A real component service (BackgroundServer, as tests and tools host one) on uvloop
    answers a health check over gRPC."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from bench.conductor_toys import make_c
    from tests.fixtures.services import start_in_process

    monkeypatch.delenv(event_loop.VARIABLE, raising=False)
    server = start_in_process(make_c())
    try:
        assert event_loop.name(server._loop) == "uvloop"
        with grpc.insecure_channel(server.address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop()
