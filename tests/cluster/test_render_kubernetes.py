"""`starmesh render kubernetes`: every shipped deployment renders to manifests that pass
the Kubernetes schemas offline (kubernetes-validate), byte for byte the same each time
for the same member certificates; the conductor's in-cluster file is the same deployment
with each service's replicas following its headless Service; the generated member Secret
holds a CA and a member certificate it signed, mounted by the members only; probes work
under mutual TLS."""
from __future__ import annotations

import base64

import pytest
import yaml
import kubernetes_validate

from cli.main import main
from cluster.deployment_dir import SHIPPED_DIR
from cluster.kubernetes.render import manifests, render_kubernetes
from cluster.mesh_ca import member_files
from conductor.deployment_file import deployment_from_dict
from core.errors import GraphError

K8S_VERSION = "1.33.0"  # a version whose schemas kubernetes-validate ships
# the files `starmesh up` launches (the toy ones place a model on services tests start)
SHIPPED = sorted(p for p in SHIPPED_DIR.glob("*.yaml") if "models" in yaml.safe_load(p.read_text()))
FILES = member_files("test")  # one set for the renders compared byte for byte
MESH = "/etc/starmesh/mesh"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_deployment_renders_valid_deterministic_manifests(path):
    text = render_kubernetes(path, "starmesh:cpu", "mesh", mesh_files=FILES)
    assert render_kubernetes(path, "starmesh:cpu", "mesh", mesh_files=FILES) == text  # same file, same bytes
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
    # a member's port trusts members only: the probe presents the pod's member certificate
    assert container["readinessProbe"]["exec"]["command"] == ["starmesh", "health", "127.0.0.1:50061",
                                                               "--mesh-tls", MESH]
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


def _mounts_member_secret(pod_spec: dict) -> bool:
    has_volume = any(v.get("secret", {}).get("secretName") == "starmesh-mesh-tls" for v in pod_spec["volumes"])
    mounts = pod_spec["containers"][0]["volumeMounts"]
    return has_volume and {"name": "mesh-tls", "mountPath": MESH, "readOnly": True} in mounts


def test_the_members_trust_a_ca_of_their_own_from_a_generated_secret(tmp_path):
    from cryptography import x509

    from runtime.tls import MEMBER_NAME, member_tls

    docs = manifests(SHIPPED_DIR / "local.yaml", "starmesh:cpu", "mesh")
    [secret] = [d for d in docs if d["kind"] == "Secret"]
    kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    assert secret["metadata"]["name"] == "starmesh-mesh-tls" and secret["type"] == "Opaque"
    directory = tmp_path / "mesh"
    directory.mkdir()
    for name, value in secret["data"].items():
        (directory / name).write_bytes(base64.b64decode(value))
    tls = member_tls(directory)  # what --mesh-tls /etc/starmesh/mesh loads in a pod
    ca, member = x509.load_pem_x509_certificate(tls.ca_pem), x509.load_pem_x509_certificate(tls.cert_pem)
    member.verify_directly_issued_by(ca)
    names = member.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert MEMBER_NAME in names.get_values_for_type(x509.DNSName)
    assert b"PRIVATE KEY" in tls.key_pem and b"PRIVATE KEY" not in b"".join(
        base64.b64decode(v) for k, v in secret["data"].items() if k != "member.key")  # the CA's key is not there
    assert manifests(SHIPPED_DIR / "local.yaml", "starmesh:cpu", "mesh")[1]["data"] != secret["data"]  # a new CA

    workloads = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs
                 if d["kind"] in ("Deployment", "StatefulSet")}
    for name, pod in workloads.items():
        args = pod["containers"][0]["args"]
        if name == "gateway":  # a client of the conductor's port: no member key
            assert not _mounts_member_secret(pod) and "--mesh-tls" not in args
        else:
            assert _mounts_member_secret(pod), name
            assert args[args.index("--mesh-tls") + 1] == MESH, name
    conductor = workloads["conductor"]["containers"][0]
    assert conductor["readinessProbe"] == {"grpc": {"port": 50050}, "periodSeconds": 2, "failureThreshold": 1,
                                           "timeoutSeconds": 5}  # its client port stays plaintext


def test_mesh_tls_false_renders_no_member_secret(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text((SHIPPED_DIR / "colocated.yaml").read_text() + "\nmesh_tls: false\n")
    docs = manifests(path, "starmesh:cpu", "mesh")
    assert not [d for d in docs if d["kind"] == "Secret"]
    for doc in docs:
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            assert not _mounts_member_secret(pod) and "--mesh-tls" not in pod["containers"][0]["args"]
            assert "grpc" in pod["containers"][0]["readinessProbe"] or doc["metadata"]["name"] == "gateway"


def test_render_keeps_the_member_certificates_it_is_given(tmp_path, capsys):
    from cluster.mesh_ca import write_member_files

    directory = write_member_files(tmp_path / "mesh", FILES)
    out = tmp_path / "out.yaml"
    argv = ["render", "kubernetes", "--deployment", str(SHIPPED_DIR / "colocated.yaml"), "--image", "i",
            "--mesh-tls", str(directory), "-o", str(out)]
    assert main(argv) == 0
    assert oct(out.stat().st_mode & 0o777) == "0o600"  # it holds the members' key
    [secret] = [d for d in yaml.safe_load_all(out.read_text()) if d["kind"] == "Secret"]
    assert {k: base64.b64decode(v) for k, v in secret["data"].items()} == FILES
    (directory / "member.key").unlink()
    assert main([*argv[:-2]]) == 2
    err = capsys.readouterr().err
    assert f"--mesh-tls {directory}" in err and "member.key: cannot read" in err
