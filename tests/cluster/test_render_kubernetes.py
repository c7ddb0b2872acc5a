"""`starmesh render kubernetes`: every shipped deployment renders to manifests that pass
the Kubernetes schemas offline (kubernetes-validate), byte for byte the same each time;
the conductor's in-cluster file is the same deployment with each service's replicas
following its headless Service, and probes work under mutual TLS."""
from __future__ import annotations

import pytest
import yaml
import kubernetes_validate

from cli.main import main
from cluster.deployment_dir import SHIPPED_DIR
from cluster.kubernetes.render import manifests, render_kubernetes
from conductor.deployment_file import deployment_from_dict
from core.errors import GraphError

K8S_VERSION = "1.33.0"  # a version whose schemas kubernetes-validate ships
# the files `starmesh up` launches (the toy ones place a model on services tests start)
SHIPPED = sorted(p for p in SHIPPED_DIR.glob("*.yaml") if "models" in yaml.safe_load(p.read_text()))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_deployment_renders_valid_deterministic_manifests(path):
    text = render_kubernetes(path, "starmesh:cpu", "mesh")
    assert render_kubernetes(path, "starmesh:cpu", "mesh") == text  # same file, same bytes
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("ConfigMap", "starmesh-deployment"), ("Deployment", "conductor"), ("Service", "conductor")} <= kinds
    config = yaml.safe_load(docs[0]["data"]["deployment.yaml"])
    in_cluster = deployment_from_dict(config)  # what the conductor reads there loads
    port = deployment_from_dict(yaml.safe_load(path.read_text())).conductor.rsplit(":", 1)[1]
    assert in_cluster.conductor == f"0.0.0.0:{port}"  # every interface, the file's own port
    for name, spec in in_cluster.services.items():
        k8s = name.replace("_", "-")
        workload = next(d for d in docs if d["metadata"]["name"] == k8s and d["kind"] in ("Deployment", "StatefulSet"))
        assert ("Service", k8s) in kinds and ("PodDisruptionBudget", k8s) in kinds
        if workload["kind"] == "Deployment":
            assert spec.dns is not None and spec.dns.name == f"{k8s}.mesh.svc.cluster.local"
        else:  # a lockstep rank: a stable pod name
            assert spec.replicas[0].startswith(f"{k8s}-0.{k8s}.mesh.svc.cluster.local:")


def test_the_gateway_runs_in_front_of_the_conductors_service():
    docs = manifests(SHIPPED_DIR / "local.yaml", "starmesh:cpu", "mesh")
    pod = _by_name(docs, "Deployment", "gateway")["spec"]["template"]
    args = pod["spec"]["containers"][0]["args"]
    assert args[:3] == ["gateway", "--conductor", "conductor.mesh.svc.cluster.local:50050"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8000"  # /metrics on its HTTP port
    service = _by_name(docs, "Service", "gateway")["spec"]
    assert service["type"] == "ClusterIP" and service["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000}]
    assert not any(d["metadata"]["name"] == "gateway" for d in manifests(SHIPPED_DIR / "colocated.yaml", "i", "mesh"))


def _by_name(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def test_pods_carry_gpu_shm_metrics_and_mooncake_settings(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text((SHIPPED_DIR / "two-host.yaml").read_text().replace("component: thinker,",
                                                                        "component: thinker, device: 'cuda:1',"))
    docs = manifests(path, "starmesh:gpu", "mesh")
    thinker = _by_name(docs, "Deployment", "thinker")["spec"]["template"]
    container = thinker["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert container["args"][container["args"].index("--device") + 1] == "cuda:0"  # the pod's one GPU
    assert thinker["metadata"]["annotations"]["prometheus.io/port"] == "9464"
    shm = next(v for v in thinker["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert container["readinessProbe"]["grpc"] == {"port": 50061}
    envs = {e["name"] for d in docs if d["kind"] == "Deployment"
            for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"STARMESH_MOONCAKE_HOSTNAME", "STARMESH_HOST_ID", "OTEL_EXPORTER_OTLP_ENDPOINT"} <= envs


def test_under_mutual_tls_readiness_is_an_exec_probe_with_the_pods_certificate(tmp_path, capsys):
    path = tmp_path / "tls.yaml"
    path.write_text((SHIPPED_DIR / "colocated.yaml").read_text() + "\ntls: {cert: m.pem, key: m.key, ca: ca.pem}\n")
    out = tmp_path / "out.yaml"
    assert main(["render", "kubernetes", "--deployment", str(path), "--image", "starmesh:cpu", "-o", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    conductor = _by_name(docs, "Deployment", "conductor")["spec"]["template"]["spec"]
    probe = conductor["containers"][0]["readinessProbe"]["exec"]["command"]
    assert probe[:3] == ["starmesh", "health", "127.0.0.1:50050"] and "--tls-cert" in probe
    assert any(v.get("secret", {}).get("secretName") == "starmesh-tls" for v in conductor["volumes"])
    assert yaml.safe_load(docs[0]["data"]["deployment.yaml"])["tls"]["ca"] == "/etc/starmesh/tls/ca.pem"


def test_bad_input_is_refused_naming_it(tmp_path, capsys):
    assert main(["render", "kubernetes", "--deployment", str(SHIPPED[0]), "--image", "x", "--namespace", "Bad_NS"]) == 2
    assert "--namespace 'Bad_NS'" in capsys.readouterr().err
    path = tmp_path / "dns.yaml"
    path.write_text("services: {a: {component: echo, replicas: {dns: 'a.x:1'}}}\nmodels: {m: {pipeline: toy, "
                    "placement: {n: a}}}\n")
    with pytest.raises(GraphError, match="services.a.replicas: replicas from dns"):
        manifests(path, "x")
