"""A conductor (in this process) over real replicas that hang: a replica stopped with
SIGSTOP is found by keepalive and heartbeats, its request fails UNAVAILABLE naming it
and the model is NOT_SERVING until SIGCONT, then serves again; a replica whose
heartbeats stop while it holds a request is marked down and its request fails, and it
is up again once it answers its health watch; a stall of the conductor's own event loop
longer than every timeout convicts no replica and fails no request."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conductor.liveness import DEFAULT_SILENCE_S
from conductor.model import ServedModel
from conductor.placement import Placement
from conductor.service import ConductorService
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.background import BackgroundServer
from runtime.component_service import ComponentService
from runtime.process import ServiceProcess
from tests.fixtures import registry
from tests.fixtures.components import Flaky
from tests.fixtures.services import describe, wait_until
from transport.codec import inline_ref
from transport.config import TransportConfig
from transport.ref_proto import ref_to_proto
from transport.transport import Transport

pytestmark = pytest.mark.timeout(300)


def model(*addresses: str) -> ServedModel:
    graph = WalkGraph("m", [N("echo", ("x",), ("x",))], [Walk("w", "echo", [E("input.x", "echo.x"),
                                                                            E("echo.x", "output.x")])])
    placement = Placement.from_dict({"services": {"svc": {"replicas": list(addresses)}},
                                     "placement": {"echo": "svc"}})
    return ServedModel("m", graph, placement)


def request(rid: str, hold: bool = True) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model="m", request_id=rid)
    req.params.update({"hold": hold})
    ref_to_proto(inline_ref(torch.tensor([1.0])), req.inputs.add(name="x").tensor)
    return req


def model_health(channel) -> str:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="m"), timeout=30)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def outcome(stub, rid: str, hold: bool = True):
    """(code name, details) of one request run to its end."""
    try:
        list(stub.Generate(request(rid, hold), timeout=120))
        return "OK", ""
    except grpc.RpcError as e:
        return e.code().name, e.details()


class Mesh:
    """A conductor over the replicas at `addresses`, its channel and a pool for held requests."""

    def __init__(self, *addresses: str, **conductor_kwargs) -> None:
        self.conductor = BackgroundServer(ConductorService([model(*addresses)], **conductor_kwargs))
        self.conductor.start()
        self.channel = grpc.insecure_channel(self.conductor.address)
        self.stub = conductor_pb2_grpc.ConductorStub(self.channel)
        self.pool = ThreadPoolExecutor(4)
        assert wait_until(lambda: model_health(self.channel) == "SERVING", 60)

    @property
    def runs(self):
        return self.conductor.hosted.executors["m"].requests

    def held(self, rid: str):
        """A request the replica holds open (Flaky's hold); its outcome's future."""
        future = self.pool.submit(outcome, self.stub, rid)
        assert wait_until(lambda: rid in self.runs and self.runs[rid].seen, 60)
        return future

    def close(self) -> None:
        self.channel.close()  # held requests end CANCELLED
        self.pool.shutdown(wait=True)
        self.conductor.stop()


@contextlib.contextmanager
def flaky_service(name: str = "flaky"):
    svc = ServiceProcess("tests.fixtures.components:make_flaky", name=name).start()
    registry.register(svc.address, describe(svc.address).arena)
    try:
        yield svc
    finally:
        registry.unregister(svc.address)
        if svc.proc.poll() is None:
            os.kill(svc.proc.pid, signal.SIGCONT)
        svc.stop(timeout_s=20)


@pytest.fixture
def flaky_process():
    with flaky_service() as svc:
        yield svc


def test_a_stopped_replica_is_down_and_fails_its_requests_until_it_continues(flaky_process):
    mesh = Mesh(flaky_process.address)
    try:
        held = mesh.held("stop-1")
        os.kill(flaky_process.pid, signal.SIGSTOP)
        try:
            assert wait_until(lambda: model_health(mesh.channel) == "NOT_SERVING", 60)
            code, details = held.result(60)
            assert code == "UNAVAILABLE" and flaky_process.address in details, details
            # with no replica up a request still tries it, and fails naming it
            code, details = outcome(mesh.stub, "stop-2", hold=False)
            assert code == "UNAVAILABLE" and flaky_process.address in details, details
        finally:
            os.kill(flaky_process.pid, signal.SIGCONT)
        assert wait_until(lambda: model_health(mesh.channel) == "SERVING", 60)
        assert outcome(mesh.stub, "cont-1", hold=False) == ("OK", "")
        assert wait_until(lambda: describe(flaky_process.address).num_open_requests == 0, 60)
    finally:
        mesh.close()


def test_new_requests_go_to_the_replica_left_while_the_other_is_stopped():
    with flaky_service("a") as a, flaky_service("b") as b:
        mesh = Mesh(a.address, b.address)
        try:
            held = [mesh.held(f"two-{i}") for i in range(2)]  # round-robin: one on each
            assert wait_until(lambda: describe(a.address).num_open_requests == 1, 30)
            os.kill(a.pid, signal.SIGSTOP)
            health = mesh.conductor.hosted.replica_health
            assert wait_until(lambda: health.serving[a.address] is False, 60)
            assert model_health(mesh.channel) == "SERVING"  # b serves it
            assert [outcome(mesh.stub, f"after-{i}", hold=False) for i in range(4)] == [("OK", "")] * 4
            assert wait_until(lambda: sum(f.done() for f in held) == 1, 60)  # a's failed, b's is held
            [(code, details)] = [f.result() for f in held if f.done()]
            assert code == "UNAVAILABLE" and a.address in details, details
            assert wait_until(lambda: describe(b.address).num_open_requests == 1, 30)  # its held one
        finally:
            mesh.close()


def quiet_replica() -> BackgroundServer:
    """A Flaky replica whose Run streams never beat: its heartbeats have stopped."""
    server = BackgroundServer(ComponentService(Flaky(), Transport(TransportConfig(host_id="test-host")),
                                               heartbeat_s=3600.0))
    server.start()
    registry.register(server.address, describe(server.address).arena)
    return server


def test_a_replica_whose_heartbeats_stop_is_marked_down_then_up_once_it_answers(caplog):
    replica = quiet_replica()
    mesh = Mesh(replica.address, run_timeout_s=600.0)  # only silence can convict it
    try:
        with caplog.at_level(logging.WARNING, logger="conductor.replica_health"):
            code, details = mesh.held("quiet-1").result(60 + DEFAULT_SILENCE_S)
        assert code == "UNAVAILABLE" and f"service {replica.address} stopped answering" in details, details
        assert any(f"replica {replica.address} is down: service {replica.address} stopped answering"
                   in r.getMessage() for r in caplog.records), caplog.records
        # it is alive (its health watch answers): up again, and it serves
        assert wait_until(lambda: model_health(mesh.channel) == "SERVING", 60)
        assert outcome(mesh.stub, "quiet-2", hold=False) == ("OK", "")
    finally:
        mesh.close()
        registry.unregister(replica.address)
        replica.stop()


def spin(seconds: float) -> None:
    """Holds the calling thread (and the GIL, as pure Python does) for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(10_000))


def test_a_stall_of_the_conductors_loop_convicts_no_replica(flaky_process):
    run_timeout_s = 2.0
    stall_s = 2 * max(run_timeout_s, DEFAULT_SILENCE_S)  # past every timeout: beats queue unread meanwhile
    mesh = Mesh(flaky_process.address, run_timeout_s=run_timeout_s)
    try:
        held = mesh.held("stall-1")
        loop = mesh.conductor._loop  # the conductor's own event loop
        loop.call_soon_threadsafe(spin, stall_s)
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(60)  # runs once the stall is over
        after = time.monotonic()
        # heartbeats read after the stall: liveness was checked many times since
        assert wait_until(lambda: mesh.runs["stall-1"].seen[flaky_process.address] > after + 1.0, 30)
        assert not held.done() and not mesh.runs["stall-1"].is_finished
        assert model_health(mesh.channel) == "SERVING"
        assert outcome(mesh.stub, "stall-2", hold=False) == ("OK", "")
    finally:
        mesh.close()
    assert held.result(60)[0] == "CANCELLED"  # its client left: nothing else ended it
