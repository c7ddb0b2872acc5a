"""Every starmesh asyncio process runs the loop core.event_loop makes: uvloop for the
conductor and the gateway (they only move messages), asyncio's own for a component
service (beside its engine thread); STARMESH_EVENT_LOOP picks one for every process;
anything else is refused, naming the variable."""
import asyncio

import grpc
import pytest

from core import event_loop


async def _which() -> str:
    await asyncio.sleep(0)
    return event_loop.name(asyncio.get_running_loop())


def test_the_default_is_the_process_role_s(monkeypatch):
    monkeypatch.delenv(event_loop.VARIABLE, raising=False)
    assert event_loop.run(_which()) == "asyncio"
    assert event_loop.run(_which(), "uvloop") == "uvloop"
    monkeypatch.setenv(event_loop.VARIABLE, "")  # empty: unset
    assert event_loop.run(_which(), "uvloop") == "uvloop"


def test_the_variable_picks_the_loop_of_every_role(monkeypatch):
    monkeypatch.setenv(event_loop.VARIABLE, "asyncio")
    assert event_loop.run(_which(), "uvloop") == "asyncio"
    monkeypatch.setenv(event_loop.VARIABLE, "uvloop")
    loop = event_loop.new_event_loop()
    try:
        assert event_loop.name(loop) == "uvloop"
    finally:
        loop.close()


def test_an_unknown_loop_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(event_loop.VARIABLE, "trio")
    with pytest.raises(ValueError, match=r"STARMESH_EVENT_LOOP='trio': must be one of uvloop, asyncio"):
        event_loop.run(_which())


def _serving(address: str) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_component_service_runs_asyncio_and_the_conductor_uvloop(monkeypatch):
    """Real servers (BackgroundServer, as tests and tools host them) on their loops answer
    a health check over gRPC."""
    from bench.conductor_inprocess import start_frontdoor_inprocess
    from bench.conductor_toys import make_c
    from tests.fixtures.services import start_in_process

    monkeypatch.delenv(event_loop.VARIABLE, raising=False)
    for server, loop in ((start_in_process(make_c()), "asyncio"), (start_frontdoor_inprocess(4), "uvloop")):
        try:
            assert event_loop.name(server._loop) == loop
            assert _serving(server.address)
        finally:
            server.stop()
