"""`starmesh render kubernetes` gives every pod the liveness probe `starmesh up`'s supervisor
uses: the gRPC health of `starmesh.liveness` with a timeout (native on a plaintext port,
`starmesh health` with the pod's certificate under mutual TLS), so a stopped or hung
process is restarted; the gateway's is an HTTP check of its own /metrics. The manifests
pass the Kubernetes schemas; a real service answers the probe's health name while it
serves and keeps answering it SERVING while it drains."""
from __future__ import annotations

import threading

import kubernetes_validate
import pytest
import torch

from cluster.deployment_dir import SHIPPED_DIR
from cluster.kubernetes.render import manifests
from runtime.health_list import LIVENESS
from runtime.items import OpenNode
from runtime.replica_probe import check_health
from tests.cluster.test_render_kubernetes import K8S_VERSION, MESH
from tests.fixtures.components import make_flaky
from tests.fixtures.services import RunStream, describe, start_in_process, wait_until
from transport.codec import inline_ref

pytestmark = pytest.mark.timeout(120)


def _containers(docs) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0] for d in docs
            if d["kind"] in ("Deployment", "StatefulSet")}


def test_every_pod_gets_the_supervisors_liveness_probe():
    docs = manifests(SHIPPED_DIR / "local.yaml", "starmesh:cpu", "mesh")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    containers = _containers(docs)
    # a member's port trusts members only: `starmesh health` with the member certificate
    thinker = containers["thinker"]["livenessProbe"]
    assert thinker["exec"]["command"] == ["starmesh", "health", "127.0.0.1:50061", "--service", LIVENESS,
                                          "--timeout", "3", "--mesh-tls", MESH]
    assert thinker["failureThreshold"] == 3 and thinker["timeoutSeconds"] > 3  # room for the interpreter
    # the conductor's client port is plaintext here: a native gRPC probe, as often as `up`'s
    assert containers["conductor"]["livenessProbe"] == {"grpc": {"port": 50050, "service": LIVENESS},
                                                        "periodSeconds": 2, "timeoutSeconds": 3,
                                                        "failureThreshold": 3}
    assert containers["gateway"]["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": 8000}
    for name, container in containers.items():
        assert "tcpSocket" not in container["livenessProbe"], name  # a stopped process still accepts TCP


def test_without_mesh_tls_services_get_the_native_probe(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text((SHIPPED_DIR / "colocated.yaml").read_text() + "\nmesh_tls: false\n")
    for name, container in _containers(manifests(path, "starmesh:cpu", "mesh")).items():
        assert container["livenessProbe"]["grpc"]["service"] == LIVENESS, name


def test_a_service_answers_the_liveness_name_serving_and_keeps_it_while_draining():
    server = start_in_process(make_flaky(), grace_s=60.0)
    stopping = threading.Thread(target=server.stop)
    try:
        assert check_health(server.address, LIVENESS).is_serving
        with RunStream(server.address) as stream:  # a held request: the stop drains until it ends
            stream.send(OpenNode("held-1", "echo", inputs={"x": inline_ref(torch.arange(4.0))},
                                 params={"hold": True}))
            assert wait_until(lambda: describe(server.address).num_open_requests == 1, 30)
            stopping.start()
            assert wait_until(lambda: check_health(server.address).status == "NOT_SERVING", 30)
            assert check_health(server.address, LIVENESS).is_serving  # draining, alive
    finally:
        if not stopping.is_alive() and not stopping.ident:
            server.stop()
        stopping.join(60)
