"""Mutual TLS between a mesh's members (`--mesh-tls`, cluster/mesh_ca.py): a process
outside the mesh cannot open a Run stream (its TLS handshake fails), whether it comes in
plaintext, trusting the CA without a certificate, or with another mesh's member
certificate; a member can, at any address. A toy mesh whose services and conductor
streams run member TLS (peer links between services included, health watches) serves a
request while the conductor's client port stays plaintext, as `starmesh up` runs the
default deployment."""
from __future__ import annotations

import asyncio

import grpc
import pytest
import torch

from bench.tls_mesh import ToyMesh, one_request
from cluster.mesh_ca import member_files, write_member_files
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.items import NodeDone, NodeOutput, OpenNode
from runtime.replica_probe import check_health
from runtime.tls import TlsConfig, member_tls
from tests.fixtures import registry
from tests.fixtures.components import Echo, inline_ref
from tests.fixtures.services import RunStream, describe, start_in_process

pytestmark = pytest.mark.timeout(300)
CALL_TIMEOUT_S = 30.0  # only a hung call reaches it: a refused handshake answers at once


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    return write_member_files(tmp_path_factory.mktemp("mesh") / "members", member_files("test"))


@pytest.fixture(scope="module")
def other_mesh(tmp_path_factory):
    return write_member_files(tmp_path_factory.mktemp("other") / "members", member_files("other"))


@pytest.fixture(scope="module")
def echo(members):
    server = start_in_process(Echo(), tls=member_tls(members))
    yield server
    server.stop()


def _open(rid: str) -> OpenNode:
    return OpenNode(request_id=rid, node="echo", inputs={"x": inline_ref(torch.arange(3.0))})


def _strangers(members, other_mesh) -> dict:
    own = member_tls(members)
    return {"plaintext": None,
            "no certificate": TlsConfig(ca=str(members / "ca.pem"), server_name=own.server_name),
            "another mesh's member": member_tls(other_mesh)}


@pytest.mark.parametrize("who", ["plaintext", "no certificate", "another mesh's member"])
def test_a_process_outside_the_mesh_cannot_open_a_run_stream(echo, members, other_mesh, who):
    tls = _strangers(members, other_mesh)[who]
    with RunStream(echo.address, timeout_s=CALL_TIMEOUT_S, tls=tls) as stranger:
        stranger.send(_open(f"stranger-{who}"))
        assert stranger.recv(CALL_TIMEOUT_S) is None  # the stream never opened
        assert stranger.error.code() == grpc.StatusCode.UNAVAILABLE, stranger.error
    assert check_health(echo.address, tls=tls, timeout_s=CALL_TIMEOUT_S).status == "UNAVAILABLE"
    assert describe(echo.address, member_tls(members)).num_open_requests == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_member_opens_run_streams_at_any_address(echo, members, host):
    port = echo.address.rpartition(":")[2]
    with RunStream(f"{host}:{port}", timeout_s=CALL_TIMEOUT_S, tls=member_tls(members)) as member:
        member.send(_open(f"member-{host}"))
        events = []
        while not any(isinstance(e, NodeDone) for e in events):
            events += member.events(CALL_TIMEOUT_S)
        assert [e.request_id for e in events if isinstance(e, NodeOutput)] == [f"member-{host}"]


def test_a_member_mesh_serves_through_a_plaintext_front_door(members, other_mesh):
    mesh = ToyMesh(None, items=3, members=members).start()
    try:
        for proc in mesh.services.values():  # the leak check reads their arenas as a member
            registry.register(proc.address, describe(proc.address, mesh.service_tls).arena, mesh.service_tls)

        async def generate() -> list[float]:
            async with grpc.aio.insecure_channel(mesh.address) as channel:  # the client port: plaintext
                values, _ = await one_request(conductor_pb2_grpc.ConductorStub(channel), "mesh-1", CALL_TIMEOUT_S)
                return values

        assert asyncio.run(generate()) == [1.0, 2.0, 3.0]  # A ~> B ~> C on member peer links
        assert check_health(mesh.address, "pipe", timeout_s=CALL_TIMEOUT_S).is_serving  # member health watches
        for who, tls in _strangers(members, other_mesh).items():
            assert check_health(mesh.services["b"].address, tls=tls, timeout_s=CALL_TIMEOUT_S).status == \
                "UNAVAILABLE", who
    finally:
        for proc in mesh.services.values():
            registry.unregister(proc.address)
        mesh.stop()
