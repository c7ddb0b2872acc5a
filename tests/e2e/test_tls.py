"""A mesh over mutual TLS with an API key at the front door, certificates made in the
test: three toy services (`starmesh serve --tls-*` processes, routed edges between them
on their own TLS peer streams) behind a conductor serve a request; plaintext clients,
clients trusting another CA and clients without or with a foreign certificate are
refused; a missing or wrong token is UNAUTHENTICATED while health needs none. Then
`starmesh up`'s launcher starts a speech deployment from a file with a `tls:` key and an
API key, and a speech request is served through it."""
from __future__ import annotations

import asyncio

import grpc
import pytest
import yaml

from bench.tls_certs import make_certs
from bench.tls_mesh import ToyMesh, one_request
from client.connection import Connection
from conductor.service import CONDUCTOR_SERVICE
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import conductor_pb2_grpc
from runtime.replica_probe import check_health, replica_status
from runtime.tls import TlsConfig
from tests.fixtures import registry
from tests.fixtures.services import describe

pytestmark = pytest.mark.timeout(300)
KEY = "test-api-key"
CALL_TIMEOUT_S = 30.0  # only a hung call reaches it: refusals answer at once


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def mesh(certs):
    tls = TlsConfig(certs.mesh_cert, certs.mesh_key, certs.ca)
    mesh = ToyMesh(tls, api_key=KEY, items=3).start()
    for proc in mesh.services.values():  # the leak check reads their arenas over TLS
        registry.register(proc.address, describe(proc.address, tls).arena, tls)
    yield mesh
    for proc in mesh.services.values():
        registry.unregister(proc.address)
    mesh.stop()


def client_tls(certs) -> TlsConfig:
    return TlsConfig(certs.client_cert, certs.client_key, certs.ca)


def generate(connection: Connection, request_id: str) -> list[float]:
    async def main():
        async with connection.aio_channel() as channel:
            values, _ = await one_request(conductor_pb2_grpc.ConductorStub(channel), request_id, CALL_TIMEOUT_S)
            return values

    return asyncio.run(main())


def list_models(connection: Connection) -> list[str]:
    with connection.channel() as channel:
        reply = conductor_pb2_grpc.ConductorStub(channel).ListModels(pb.ListModelsRequest(), timeout=CALL_TIMEOUT_S)
    return [m.name for m in reply.models]


def refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def test_a_mutual_tls_mesh_serves_requests_with_the_token(mesh, certs):
    connection = Connection(mesh.address, KEY, client_tls(certs))
    assert generate(connection, "tls-1") == [1.0, 2.0, 3.0]
    assert generate(connection, "tls-2") == [1.0, 2.0, 3.0]
    assert list_models(connection) == ["pipe"]


@pytest.mark.parametrize("who", ["plaintext", "wrong CA", "no client cert", "foreign client cert"])
def test_clients_that_fail_tls_are_refused(mesh, certs, who):
    tls = {"plaintext": None,
           "wrong CA": TlsConfig(certs.client_cert, certs.client_key, certs.wrong_ca),
           "no client cert": TlsConfig(ca=certs.ca),
           "foreign client cert": TlsConfig(certs.wrong_client_cert, certs.wrong_client_key, certs.ca)}[who]
    error = refusal(lambda: generate(Connection(mesh.address, KEY, tls), f"refused-{who}"))
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
    # The services refuse them as well: a stranger cannot open a Run stream or probe one.
    service = mesh.services["b"].address
    assert check_health(service, tls=tls, timeout_s=CALL_TIMEOUT_S).status == "UNAVAILABLE"


@pytest.mark.parametrize("key", ["", "not-the-key", KEY + "x"])
def test_a_missing_or_wrong_token_is_unauthenticated(mesh, certs, key):
    connection = Connection(mesh.address, key, client_tls(certs))
    for call in (lambda: generate(connection, "no-token"), lambda: list_models(connection)):
        error = refusal(call)
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error
        assert "authorization" in error.details()
    for proc in mesh.services.values():  # refused before any work reached a service
        assert describe(proc.address, mesh.tls).num_open_requests == 0


def test_health_needs_no_token(mesh, certs):
    for service in ("", CONDUCTOR_SERVICE):
        assert check_health(mesh.address, service, tls=client_tls(certs)).is_serving
    rows = [replica_status(proc.address, tls=mesh.tls) for proc in mesh.services.values()]
    assert [row["health"] for row in rows] == ["SERVING"] * 3


def test_up_serves_speech_from_a_deployment_with_tls_and_an_api_key(tiny_omni, tmp_path):
    from client.speech import speak
    from cluster.launchable import read_launchable
    from cluster.launcher import Cluster
    from cluster.shipped_deployments import rewrite_shipped
    from engine.models.qwen3_omni.tiny import chat_prompt

    path = rewrite_shipped("colocated", {"omni": str(tiny_omni)}, ("qwen3-omni",), str(tmp_path))
    data = yaml.safe_load(path.read_text())
    certs = make_certs(tmp_path / "certs")  # beside the file: its tls paths are relative to it
    data["tls"] = {"cert": "certs/mesh.pem", "key": "certs/mesh.key", "ca": "certs/ca.pem"}
    path.write_text(yaml.safe_dump(data))
    with Cluster(read_launchable(path), path, api_key=KEY, log=lambda line: None) as cluster:
        services = [proc.address for proc in cluster.services]
        tls = cluster.service_tls  # the services trust the members' CA of this start, not the file's
        assert tls is not cluster.tls and tls.server_name
        for address in services:
            registry.register(address, describe(address, tls).arena, tls)
        try:
            connection = Connection(cluster.conductor_address, KEY, client_tls(certs))
            summary = asyncio.run(speak(connection, "qwen3-omni", chat_prompt("Hello there"),
                                        {"max_new_tokens": 6, "max_frames": 8}, timeout_s=120))
            assert summary.num_chunks >= 1 and summary.text_ids
            error = refusal(lambda: list_models(Connection(cluster.conductor_address, "", client_tls(certs))))
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            for address in services:
                registry.unregister(address)

