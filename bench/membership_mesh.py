"""A mesh whose replicas come from DNS, for the membership benchmark and tests: a real
DNS server on loopback (bench.loopback_dns) answering for one name, `starmesh serve`
replicas of the slow echo on 127.0.0.2, .3, ... sharing one port (A records carry no
port), and an in-process conductor resolving the name every `refresh_s`.

Requests are the slow echo's: `delay_s` after open the input comes back.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import socket

import grpc
import torch

from bench.loopback_dns import LoopbackDns
from conductor.model import ServedModel
from conductor.placement import Placement
from conductor.service import ConductorService
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from runtime.replica_probe import check_health, replica_status
from transport.codec import inline_ref
from transport.ref_proto import ref_to_proto

NAME = "echo.mesh.test"
MODEL, SERVICE = "echo", "svc"
REFRESH_S = 0.1


def shared_port(hosts: list[str]) -> int:
    """A port free on every one of `hosts` (loopback addresses) right now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = probe.getsockname()[1]
        try:
            with contextlib.ExitStack() as stack:
                for host in hosts:
                    s = stack.enter_context(socket.socket())
                    s.bind((host, port))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no port free on all of {hosts}")


def dns_model(port: int, nameserver: str, refresh_s: float = REFRESH_S) -> ServedModel:
    graph = WalkGraph(MODEL, [N("echo", ("x",), ("x",))],
                      [Walk("w", "echo", [E("input.x", "echo.x"), E("echo.x", "output.x")])])
    replicas = {"dns": f"{NAME}:{port}", "nameserver": nameserver, "refresh_s": refresh_s}
    placement = Placement.from_dict({"services": {SERVICE: {"replicas": replicas}}, "placement": {"echo": SERVICE}})
    return ServedModel(MODEL, graph, placement)


def request(rid: str, **params) -> pb.GenerateRequest:
    req = pb.GenerateRequest(model=MODEL, request_id=rid)
    req.params.update(params)
    ref_to_proto(inline_ref(torch.tensor([1.0])), req.inputs.add(name="x").tensor)
    return req


class MembershipMesh:
    """replicas: host -> its ServiceProcess; dns: the LoopbackDns; conductor: the
    BackgroundServer of the ConductorService; send(): one request on a worker thread."""

    def __init__(self, num_replicas: int, grace_s: float = 10.0, refresh_s: float = REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self.hosts = [f"127.0.0.{i + 2}" for i in range(num_replicas)]
        self.port = shared_port(self.hosts)
        self.replicas = {h: ServiceProcess("bench.echo_components:make_slow", ["--grace-s", str(grace_s)],
                                           host=h, port=self.port, name=f"slow-{h}") for h in self.hosts}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "MembershipMesh":
        try:
            self.dns = self._stack.enter_context(LoopbackDns())
            self.dns.set(NAME, [])
            for proc in self.replicas.values():
                proc.launch()
                self._stack.callback(proc.stop)
            for proc in self.replicas.values():
                proc.wait_serving()
            service = ConductorService([dns_model(self.port, self.dns.address, self.refresh_s)])
            self.conductor = BackgroundServer(service)
            self.conductor.start()
            self._stack.callback(self.conductor.stop)
            self.channel = self._stack.enter_context(grpc.insecure_channel(self.conductor.address))
            self.stub = conductor_pb2_grpc.ConductorStub(self.channel)
            self.pool = self._stack.enter_context(concurrent.futures.ThreadPoolExecutor(32))
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def endpoint(self, host: str) -> str:
        return f"{host}:{self.port}"

    @property
    def service(self) -> ConductorService:
        return self.conductor.hosted

    def publish(self, hosts: list[str]) -> None:
        """The name's A records from now on."""
        self.dns.set(NAME, hosts)

    def members(self) -> tuple[str, ...]:
        return self.service.selectors[MODEL].members(SERVICE)

    def is_serving(self, host: str) -> bool:
        """The conductor takes `host` as a member that passed its health watch."""
        endpoint = self.endpoint(host)
        return endpoint in self.members() and self.service.replica_health.serving.get(endpoint, False)

    def model_health(self) -> str:
        return check_health(self.conductor.address, MODEL).status

    def open_requests(self, host: str) -> int:
        """Requests with state on the replica at `host` now (its Describe); -1 when down."""
        return replica_status(self.endpoint(host)).get("open_requests", -1)

    def call(self, rid: str, **params):
        """One Generate: "ok", or (status name, details)."""
        try:
            events = list(self.stub.Generate(request(rid, **params), timeout=120))
        except grpc.RpcError as e:
            return e.code().name, e.details()
        return "ok" if any(ev.WhichOneof("kind") == "tensor" for ev in events) else ("NO_OUTPUT", "")

    def send(self, rid: str, **params) -> concurrent.futures.Future:
        """call() on a worker thread."""
        return self.pool.submit(self.call, rid, **params)

    def reached(self, rid: str) -> set[str]:
        """The replicas an open request was sent to (empty once it ended)."""
        run = self.service.executors[MODEL].requests.get(rid)
        return set(run.reached) if run is not None else set()
