"""`starmesh render kubernetes`: one deployment file -> the manifests that run it in a
cluster, deterministically (the same file and member certificates give the same bytes).

    text = render_kubernetes("compose/deployments/local.yaml", image="starmesh:cpu", namespace="mesh")

Per service: a Deployment of as many pods as the file lists replicas (a StatefulSet of
one for a lockstep group's member, whose rank needs a stable name), a headless Service
(one A record per ready pod: what the conductor's DNS membership follows) and a
PodDisruptionBudget. The conductor: a ConfigMap holding the in-cluster deployment file,
a Deployment, a ClusterIP Service and a PodDisruptionBudget. The HTTP gateway, when the
file names one: a Deployment, a ClusterIP Service and a PodDisruptionBudget. Unless the
file says `mesh_tls: false`: the Secret `starmesh-mesh-tls` with the members' CA and
certificate (cluster/mesh_ca.py: a new set per render, or the files given), mounted by
every service and the conductor, which then trust only each other (mutual TLS).

No second source of truth: the in-cluster file is the same file with each service's
replica list replaced by its headless Service's name (conductor/dns_replicas.py), and
each pod runs the `starmesh serve` flags `starmesh up` would (cluster/serve_args.py).
"""
from __future__ import annotations

import base64
import copy
from pathlib import Path

import yaml

from cluster.kubernetes.cluster_names import (CLUSTER_DOMAIN, CONFIG_DIR, METRICS_PORT, k8s_name, pod_host,
                                              service_host, service_port)
from cluster.kubernetes.pod_spec import GRACE_S, MESH_SECRET, PodSpec, mesh_args, tls_args, tls_paths
from cluster.launchable import check_launchable
from cluster.mesh_ca import member_files
from cluster.serve_args import serve_args
from conductor.deployment import Deployment
from conductor.deployment_file import deployment_from_dict, load_yaml
from conductor.service_spec import ServiceSpec
from core.errors import GraphError

REFRESH_S = 2.0  # how often the conductor re-reads a headless Service's records
CONFIG_MAP = "starmesh-deployment"
DEFAULT_OTLP = "http://otel-collector:4317"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's file) as literal blocks: readable in the output."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def render_kubernetes(path: "str | Path", image: str, namespace: str = "default", otlp: str = DEFAULT_OTLP,
                      mesh_files: dict[str, bytes] | None = None) -> str:
    """The manifests as one multi-document YAML text (module docstring)."""
    return yaml.dump_all(manifests(path, image, namespace, otlp, mesh_files), Dumper=_Dumper, sort_keys=True,
                         default_flow_style=False)


def manifests(path: "str | Path", image: str, namespace: str = "default", otlp: str = DEFAULT_OTLP,
              mesh_files: dict[str, bytes] | None = None) -> list[dict]:
    """mesh_files: the members' files (cluster.mesh_ca.member_files; None: a new set)."""
    raw = load_yaml(Path(path))
    deployment = check_launchable(deployment_from_dict(_without_tls(raw), Path(path).parent))
    if k8s_name(namespace) != namespace:
        raise GraphError(f"--namespace {namespace!r} is not a DNS-1123 label")
    in_cluster = in_cluster_file(raw, deployment, namespace)
    # checked as the conductor will read it; its dlo_groups give the members' rendezvous flags
    scope = _Scope(deployment, deployment_from_dict(_without_tls(in_cluster)), image, namespace, otlp,
                   is_tls="tls" in raw, is_member=deployment.mesh_tls)
    out = [scope.config_map(in_cluster)]
    if scope.is_member:
        out.append(scope.mesh_secret(mesh_files or member_files(deployment.name)))
    for spec in deployment.services.values():
        out += scope.service(spec)
    return out + scope.conductor() + scope.gateway()


def _without_tls(raw: dict) -> dict:
    """The file checked without reading its certificates (the cluster's come from a Secret)."""
    return {k: v for k, v in raw.items() if k != "tls"}


def lockstep_members(deployment: Deployment) -> dict[str, tuple[str, int]]:
    """Service -> (its dlo group, its rank)."""
    return {m: (g.name, rank) for g in deployment.dlo_groups.values() for rank, m in enumerate(g.members)}


def in_cluster_file(raw: dict, deployment: Deployment, namespace: str) -> dict:
    """The deployment file the conductor reads in the cluster (module docstring). A
    lockstep member keeps a static replica: its StatefulSet pod's stable name."""
    data = copy.deepcopy(raw)
    members = lockstep_members(deployment)
    for name, spec in deployment.services.items():
        entry = data["services"][name]
        entry.pop("metrics", None)  # every pod serves /metrics on METRICS_PORT, scraped by annotation
        port = service_port(spec)
        if name in members:
            entry["replicas"] = [f"{pod_host(name, namespace)}:{port}"]
        else:
            entry["replicas"] = {"dns": f"{service_host(name, namespace)}:{port}", "refresh_s": REFRESH_S}
    for group in data.get("dlo_groups", {}).values():  # rank 0 binds the rendezvous
        group["address"] = f"{pod_host(group['members'][0], namespace)}:{_port(group['address'])}"
    data["conductor"] = {"address": f"0.0.0.0:{_port(deployment.conductor)}", "metrics": f"0.0.0.0:{METRICS_PORT}"}
    if deployment.gateway:
        data["gateway"] = {"address": f"0.0.0.0:{_port(deployment.gateway)}"}
    if "tls" in data:
        data["tls"] = tls_paths()
    return data


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


class _Scope:
    """What every manifest of one render shares."""

    def __init__(self, deployment: Deployment, in_cluster: Deployment, image: str, namespace: str, otlp: str,
                 is_tls: bool, is_member: bool) -> None:
        self.in_cluster = in_cluster
        self.deployment, self.image, self.namespace, self.otlp, self.is_tls = deployment, image, namespace, otlp, is_tls
        self.members = lockstep_members(deployment)
        self.is_member = is_member  # the services and the conductor mount the member Secret

    def mesh_secret(self, files: dict[str, bytes]) -> dict:
        """The members' CA and certificate (cluster/mesh_ca.py), keyed by file name."""
        data = {name: base64.b64encode(pem).decode() for name, pem in sorted(files.items())}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": self.meta(MESH_SECRET, "mesh-tls"),
                "type": "Opaque", "data": data}

    def _member_tls(self) -> list[str]:
        """A service's TLS flags: the member Secret, or the operator's files without mesh_tls."""
        return mesh_args(self.is_member) or tls_args(self.is_tls)

    def meta(self, name: str, component: str) -> dict:
        return {"name": name, "namespace": self.namespace, "labels": self.labels(component)}

    def labels(self, component: str) -> dict:
        return {"app.kubernetes.io/name": "starmesh", "app.kubernetes.io/instance": k8s_name(self.deployment.name),
                "app.kubernetes.io/component": component}

    def config_map(self, data: dict) -> dict:
        text = yaml.safe_dump(data, sort_keys=True, default_flow_style=False)
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": self.meta(CONFIG_MAP, "conductor"),
                "data": {"deployment.yaml": text}}

    def _tiny(self, names) -> tuple[str, ...]:
        kinds = {self.deployment.checkpoints[n]["tiny"] for n in names if "tiny" in self.deployment.checkpoints[n]}
        return tuple(sorted(kinds))

    def _checkpoint_dir(self, spec: ServiceSpec) -> str:
        if not spec.checkpoint:
            return ""
        ck = self.deployment.checkpoints[spec.checkpoint]
        return f"/cache/tiny/{ck['tiny']}" if "tiny" in ck else str(ck["path"])  # a path: mounted by the operator

    def service(self, spec: ServiceSpec) -> list[dict]:
        name, port = k8s_name(spec.name), service_port(spec)
        is_gpu = spec.device.startswith("cuda")
        # a pod sees the one GPU it asked for as cuda:0
        args = ["serve", spec.component, "--host", "0.0.0.0", "--port", str(port), "--metrics-port",
                str(METRICS_PORT), "--grace-s", str(GRACE_S), *self._member_tls(),
                *serve_args(spec, self.in_cluster, self._checkpoint_dir(spec), "cuda:0" if is_gpu else None,
                            host_id=False)]
        extra = {}
        group = self.members.get(spec.name)
        if group is not None and group[1] == 0:
            extra["rendezvous"] = _port(self.deployment.dlo_groups[group[0]].address)
        pod = PodSpec(self.image, tuple(args), port, self.is_tls, self._tiny([spec.checkpoint] if spec.checkpoint else []),
                      1 if is_gpu else 0, extra, spec.mooncake, self.otlp, self.is_member, tuple(self._member_tls()))
        selector = self.labels(name)
        workload = {"replicas": 1 if group else len(spec.replicas), "selector": {"matchLabels": selector},
                    "template": pod.template(selector)}
        if group:  # a rank: stable identity, and a replacement only once the old pod is gone
            workload.update(serviceName=name, podManagementPolicy="Parallel")
        kind = "StatefulSet" if group else "Deployment"
        service_ports = [{"name": "grpc", "port": port, "targetPort": port},
                         {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT}]
        service_ports += [{"name": n, "port": p, "targetPort": p} for n, p in sorted(extra.items())]
        headless = {"apiVersion": "v1", "kind": "Service", "metadata": self.meta(name, name),
                    "spec": {"clusterIP": "None", "selector": selector, "ports": service_ports,
                             # a rank's peers must find it before it is ready: the group forms first
                             "publishNotReadyAddresses": bool(group)}}
        return [{"apiVersion": "apps/v1", "kind": kind, "metadata": self.meta(name, name), "spec": workload},
                headless, self.budget(name)]

    def budget(self, name: str) -> dict:
        """One pod of the component may be evicted at a time (a node drain moves them one by one)."""
        return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": self.meta(name, name),
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": self.labels(name)}}}

    def conductor(self) -> list[dict]:
        port = _port(self.deployment.conductor)
        args = ["conductor", "--deployment", f"{CONFIG_DIR}/deployment.yaml", "--host", "0.0.0.0", "--port", str(port),
                "--metrics-port", str(METRICS_PORT), *mesh_args(self.is_member)]
        pod = PodSpec(self.image, tuple(args), port, self.is_tls, self._tiny(self.deployment.checkpoints),
                      otlp=self.otlp, is_member=self.is_member, probe_tls=tuple(tls_args(self.is_tls)))
        selector = self.labels("conductor")
        template = pod.template(selector)
        template["spec"]["volumes"].append({"name": "deployment", "configMap": {"name": CONFIG_MAP}})
        template["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "deployment", "mountPath": CONFIG_DIR + "/deployment.yaml", "subPath": "deployment.yaml",
             "readOnly": True})
        service = {"apiVersion": "v1", "kind": "Service", "metadata": self.meta("conductor", "conductor"),
                   "spec": {"type": "ClusterIP", "selector": selector,
                            "ports": [{"name": "grpc", "port": port, "targetPort": port},
                                      {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT}]}}
        workload = {"replicas": 1, "selector": {"matchLabels": selector}, "template": template}
        return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": self.meta("conductor", "conductor"),
                 "spec": workload}, service, self.budget("conductor")]

    def gateway(self) -> list[dict]:
        """The HTTP gateway in front of the conductor's ClusterIP Service (none when the file
        names none). Ready once it listens (TCP): its own /health reports the models, and one
        model down must not take the front door out of its Service."""
        if not self.deployment.gateway:
            return []
        port = _port(self.deployment.gateway)
        conductor = f"conductor.{self.namespace}.{CLUSTER_DOMAIN}:{_port(self.deployment.conductor)}"
        args = ["gateway", "--conductor", conductor, "--host", "0.0.0.0", "--port", str(port),
                *tls_args(self.is_tls)]
        selector = self.labels("gateway")
        template = PodSpec(self.image, tuple(args), port, self.is_tls, otlp=self.otlp).template(selector)
        template["metadata"]["annotations"]["prometheus.io/port"] = str(port)  # /metrics on its HTTP port
        container = template["spec"]["containers"][0]
        container["ports"] = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
        container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 2, "failureThreshold": 1}
        # alive while its event loop answers HTTP (/metrics needs nothing from the conductor)
        container["livenessProbe"] = {"httpGet": {"path": "/metrics", "port": port}, "periodSeconds": 2,
                                      "timeoutSeconds": 3, "failureThreshold": 3}
        service = {"apiVersion": "v1", "kind": "Service", "metadata": self.meta("gateway", "gateway"),
                   "spec": {"type": "ClusterIP", "selector": selector,
                            "ports": [{"name": "http", "port": port, "targetPort": port}]}}
        workload = {"replicas": 1, "selector": {"matchLabels": selector}, "template": template}
        return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": self.meta("gateway", "gateway"),
                 "spec": workload}, service, self.budget("gateway")]
