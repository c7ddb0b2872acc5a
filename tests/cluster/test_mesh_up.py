"""`starmesh up` makes the deployment's own CA and member certificate at every start
(0700 directory, 0600 files, under the cache root; the CA's key never written, nothing
printed), runs mutual TLS between the members, keeps the conductor's client port as it
was (plaintext on loopback: every README example still reaches it), lets `starmesh
status` probe the members with them, and removes them at stop. A process outside the
mesh cannot open a Run stream; `mesh_tls: false` turns it all off. The toy-tagger
deployment, as child processes."""
from __future__ import annotations

import asyncio
import os

import grpc
import pytest
import yaml

from cli.main import main
from client.events import TextDelta
from client.generate_call import GenerateCall
from client.session import ConductorSession
from cluster import supervision_file
from cluster.registry import build_tiny
from cluster.shipped_deployments import rewrite_shipped
from cluster.stack import start_stack
from runtime.items import OpenNode
from runtime.replica_probe import check_health
from runtime.tls import MEMBER_FILES
from tests.fixtures import registry
from tests.fixtures.services import RunStream, describe

pytestmark = pytest.mark.timeout(300)
CALL_TIMEOUT_S = 30.0  # only a hung call reaches it


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_tiny("toy-tagger", tmp_path_factory.mktemp("toy") / "tiny", seed=0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("STARMESH_CACHE", str(root))  # this process's and every child's
    return root


def _deployment(checkpoint, directory, **extra):
    path = rewrite_shipped("toy-tagger", {"tagger": str(checkpoint)}, directory=str(directory))
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **extra}))
    return path


async def _tags(conductor: str) -> list[int]:
    async with ConductorSession(conductor) as session:  # a bare address: plaintext, as the README's examples
        events = [e async for e in session.generate(GenerateCall("toy-tagger", text="Hi mesh"))]
    return [i for e in events if isinstance(e, TextDelta) for i in e.token_ids]


def test_up_runs_mutual_tls_between_members_with_certificates_of_its_own(checkpoint, cache, tmp_path, capsys):
    path = _deployment(checkpoint, tmp_path)
    stack = start_stack(path, trace_store=False, log=lambda line: None)
    cluster = stack.cluster
    tagger = cluster.services[0].address
    try:
        directory = cluster.mesh_dir
        assert directory.parent == cache / "mesh-tls"
        assert oct(directory.stat().st_mode & 0o777) == "0o700"
        assert {f.name: oct(f.stat().st_mode & 0o777) for f in directory.iterdir()} == {
            name: "0o600" for name in MEMBER_FILES.values()}  # the CA's key is not among them
        registry.register(tagger, describe(tagger, cluster.service_tls).arena, cluster.service_tls)

        assert asyncio.run(_tags(cluster.conductor_address))  # served through member streams
        assert check_health(cluster.conductor_address, "toy-tagger").is_serving  # member health watches
        with RunStream(tagger, timeout_s=CALL_TIMEOUT_S) as stranger:  # a local process, no member cert
            stranger.send(OpenNode("squat", "tag"))
            assert stranger.recv(CALL_TIMEOUT_S) is None
            assert stranger.error.code() == grpc.StatusCode.UNAVAILABLE
        assert check_health(tagger, timeout_s=CALL_TIMEOUT_S).status == "UNAVAILABLE"

        assert supervision_file.mesh_tls_dir(cluster.deployment.conductor) == str(directory)
        capsys.readouterr()
        assert main(["status", "--deployment", str(path)]) == 0  # probes with the running up's members
        assert "SERVING" in capsys.readouterr().out
    finally:
        registry.unregister(tagger)
        stack.stop()
    assert not directory.exists()  # removed at stop


def test_a_restarted_up_makes_a_new_ca_and_removes_a_dead_ups(checkpoint, cache, tmp_path):
    path = _deployment(checkpoint, tmp_path)
    stack = start_stack(path, trace_store=False, log=lambda line: None)
    try:
        first_ca = (stack.cluster.mesh_dir / MEMBER_FILES["ca"]).read_bytes()
    finally:
        stack.stop()
    stale = cache / "mesh-tls" / "up-999999999-dead"  # an `up` killed before it could remove its own
    stale.mkdir()
    stack = start_stack(path, trace_store=False, log=lambda line: None)
    try:
        assert (stack.cluster.mesh_dir / MEMBER_FILES["ca"]).read_bytes() != first_ca
        assert not stale.exists()
    finally:
        stack.stop()
    assert not os.listdir(cache / "mesh-tls")


def test_mesh_tls_false_keeps_the_members_plaintext(checkpoint, cache, tmp_path):
    path = _deployment(checkpoint, tmp_path, mesh_tls=False)
    stack = start_stack(path, trace_store=False, log=lambda line: None)
    tagger = stack.cluster.services[0].address
    try:
        assert stack.cluster.mesh_dir is None and stack.cluster.service_tls is None
        assert check_health(tagger, timeout_s=CALL_TIMEOUT_S).is_serving  # plaintext, as before
        registry.register(tagger, describe(tagger).arena)
        assert asyncio.run(_tags(stack.cluster.conductor_address))
    finally:
        registry.unregister(tagger)
        stack.stop()
    assert not (cache / "mesh-tls").exists()
