"""The conductor's admission, heartbeat liveness and per-model health, against real
services: past max_in_flight + max_waiting a request is refused with a retry hint; a
request a replica stops listing in its heartbeats fails UNAVAILABLE naming it, while
one that is listed outlives the timeout; a model is NOT_SERVING while a service it
needs has no serving replica (a request then fails fast, naming the replica), and
SERVING again once one is back (served at once)."""
from __future__ import annotations

import grpc
import pytest
import torch
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conductor.admission import Admission, AdmissionConfig
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
from runtime.server import ServerConfig
from tests.fixtures import registry
from tests.fixtures.components import Flaky
from tests.fixtures.services import describe, wait_until
from transport.codec import inline_ref
from transport.config import TransportConfig
from transport.ref_proto import ref_to_proto
from transport.transport import Transport

pytestmark = pytest.mark.timeout(120)
RUN_TIMEOUT_S = 1.0


def flaky_server(heartbeat_s: float, port: int = 0) -> BackgroundServer:
    service = ComponentService(Flaky(), Transport(TransportConfig(host_id="test-host")), heartbeat_s=heartbeat_s)
    server = BackgroundServer(service, ServerConfig(port=port))
    server.start()
    registry.register(server.address, describe(server.address).arena)  # its arena lives past one test
    return server


def model(name: str, address: str) -> ServedModel:
    graph = WalkGraph(name, [N("echo", ("x",), ("x",))], [Walk("w", "echo", [E("input.x", "echo.x"),
                                                                              E("echo.x", "output.x")])])
    placement = Placement.from_dict({"services": {f"svc_{name}": {"replicas": [address]}},
                                     "placement": {"echo": f"svc_{name}"}})
    return ServedModel(name, graph, placement)


@pytest.fixture(scope="module")
def mesh():
    servers = {"a": flaky_server(0.05), "b": flaky_server(3600.0), "c": flaky_server(0.05)}
    admission = Admission({"a": AdmissionConfig(max_in_flight=2, max_waiting=1)})
    conductor = BackgroundServer(ConductorService([model(n, s.address) for n, s in servers.items()],
                                                  admission=admission, run_timeout_s=RUN_TIMEOUT_S))
    conductor.start()
    channel = grpc.insecure_channel(conductor.address)
    yield conductor, servers, channel
    channel.close()
    conductor.stop()
    for server in servers.values():
        registry.unregister(server.address)
        server.stop()


def request(model_name: str, rid: str, hold: bool = True) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model=model_name, request_id=rid)
    req.params.update({"hold": hold})
    ref_to_proto(inline_ref(torch.tensor([1.0])), req.inputs.add(name="x").tensor)
    return req


def test_past_both_limits_a_request_is_refused_with_a_retry_hint(mesh):
    conductor, servers, channel = mesh
    stub = conductor_pb2_grpc.ConductorStub(channel)
    admission = conductor.hosted.admission
    calls = [stub.Generate(request("a", f"adm-{i}")) for i in range(3)]  # 2 run, 1 waits
    assert wait_until(lambda: _counts(admission.stats("a")) == {"in_flight": 2, "waiting": 1, "refused": 0}, 30)
    with pytest.raises(grpc.RpcError) as refused:
        list(stub.Generate(request("a", "adm-over")))
    err = refused.value
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "admission.max_waiting" in err.details()
    trailers = dict(err.trailing_metadata())
    assert int(trailers["retry-after-ms"]) >= 1
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and info.retry_delay.ToMilliseconds() == int(trailers["retry-after-ms"])
    calls[0].cancel()  # a slot frees: the waiting request is admitted
    assert wait_until(lambda: admission.stats("a")["waiting"] == 0 and len(servers["a"].hosted.component.held) == 2,
                      30)
    admission.check_integrity()
    for call in calls[1:]:
        call.cancel()
    assert wait_until(lambda: admission.stats("a")["in_flight"] == 0, 30)
    assert wait_until(lambda: describe(servers["a"].address).num_open_requests == 0, 30)
    admission.check_integrity()


def _counts(stats: dict) -> dict:
    return {k: stats[k] for k in ("in_flight", "waiting", "refused")}


def test_a_request_its_replica_stops_listing_fails_and_a_listed_one_lives_on(mesh):
    conductor, servers, channel = mesh
    stub = conductor_pb2_grpc.ConductorStub(channel)
    listed = stub.Generate(request("a", "live-1"))
    runs = conductor.hosted.executors["a"].requests
    assert wait_until(lambda: "live-1" in runs and runs["live-1"].seen, 30)
    first = runs["live-1"].seen[servers["a"].address]
    with pytest.raises(grpc.RpcError) as dropped:  # its service never sends a heartbeat
        list(stub.Generate(request("b", "silent-1")))
    assert dropped.value.code() == grpc.StatusCode.UNAVAILABLE
    assert servers["b"].address in dropped.value.details() and "heartbeat" in dropped.value.details()
    # the other was listed meanwhile, past its timeout, and still runs
    assert wait_until(lambda: runs["live-1"].seen[servers["a"].address] > first + 2 * RUN_TIMEOUT_S, 30)
    assert "live-1" in runs and not runs["live-1"].is_finished
    listed.cancel()
    assert wait_until(lambda: describe(servers["b"].address).num_open_requests == 0, 30)


def model_health(channel, name: str) -> str:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def test_a_model_is_not_serving_while_its_service_has_no_replica(mesh):
    conductor, servers, channel = mesh
    stub = conductor_pb2_grpc.ConductorStub(channel)
    assert wait_until(lambda: model_health(channel, "c") == "SERVING", 30)
    port = servers["c"].port
    registry.unregister(servers["c"].address)
    servers["c"].stop()
    assert wait_until(lambda: model_health(channel, "c") == "NOT_SERVING", 30)
    assert model_health(channel, "a") == "SERVING"
    address = f"127.0.0.1:{port}"
    with pytest.raises(grpc.RpcError) as down:  # tried anyway (no replica is up): fails fast, naming it
        list(stub.Generate(request("c", "down-1", hold=False)))
    assert down.value.code() == grpc.StatusCode.UNAVAILABLE and address in down.value.details()
    servers["c"] = flaky_server(0.05, port)  # back on its port: served at once, and the watch sees it
    events = list(stub.Generate(request("c", "up-1", hold=False)))
    assert any(ev.WhichOneof("kind") == "tensor" for ev in events)
    assert wait_until(lambda: model_health(channel, "c") == "SERVING", 30)
