"""The pod of one starmesh process in a cluster: its container, probes, volumes and
environment, as Kubernetes API mappings.

Probes: readiness is the gRPC health of the whole server (NOT_SERVING from the first
moment of a graceful stop, so the pod leaves its headless Service's records and the
conductor drains it); under mutual TLS a native gRPC probe cannot present a client
certificate, so it is an exec probe running `starmesh health` with the pod's own
certificate. Liveness and startup are TCP connects to the gRPC port: a replica that is
loading or draining is alive, and must not be restarted for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cluster.kubernetes.cluster_names import CACHE_DIR, METRICS_PORT, TLS_DIR
from transport.config import TransportConfig

TLS_FILES = {"cert": "cert.pem", "key": "key.pem", "ca": "ca.pem"}  # keys of the `starmesh-tls` Secret
TLS_SECRET = "starmesh-tls"
GRACE_S = 30  # `serve --grace-s`: in-flight work finishes within it
SHM_HEADROOM_MIB = 256  # beside the arena: torch and the Mooncake engine map segments too
RUN_AS = 10001  # the image's unprivileged `starmesh` user (compose/Dockerfile)


def tls_args(is_tls: bool) -> list[str]:
    """The flags that give a process the mounted certificate (none: plaintext)."""
    if not is_tls:
        return []
    return [arg for key, name in TLS_FILES.items() for arg in (f"--tls-{key}", f"{TLS_DIR}/{name}")]


def tls_paths() -> dict[str, str]:
    """The conductor's `tls:` key in the cluster: the mounted Secret's files."""
    return {key: f"{TLS_DIR}/{name}" for key, name in TLS_FILES.items()}


@dataclass(frozen=True)
class PodSpec:
    """One process's pod. args: after `starmesh` (serve/conductor and their flags);
    port: its gRPC port; tiny_kinds: tiny checkpoints an init container builds into the
    cache; num_gpus: nvidia.com/gpu the container asks for; extra_ports: name -> port
    (a lockstep group's rendezvous); mooncake: its transfer engine is reached at the
    pod's IP; otlp: where spans go ("" for nowhere)."""

    image: str
    args: tuple[str, ...]
    port: int
    is_tls: bool = False
    tiny_kinds: tuple[str, ...] = ()
    num_gpus: int = 0
    extra_ports: dict = field(default_factory=dict)
    mooncake: bool = False
    otlp: str = ""

    def __post_init__(self) -> None:
        if not self.image:
            raise ValueError("pod.image must name a container image")
        if not 0 < self.port < 65536:
            raise ValueError(f"pod.port must be in 1..65535, got {self.port}")

    def template(self, labels: dict, grace_s: int = GRACE_S) -> dict:
        """The PodTemplateSpec."""
        annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                       "prometheus.io/path": "/metrics"}
        spec = {
            "terminationGracePeriodSeconds": grace_s + 10,
            "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS},
            "containers": [self._container()],
            "volumes": self._volumes(),
        }
        if self.tiny_kinds:
            spec["initContainers"] = [self._builder()]
        return {"metadata": {"labels": dict(labels), "annotations": annotations}, "spec": spec}

    def _env(self) -> list[dict]:
        env = [
            # every pod is its own transport host: tensors to another pod never go through shm
            {"name": "STARMESH_HOST_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "STARMESH_CACHE", "value": CACHE_DIR},
        ]
        if self.mooncake:
            env.append({"name": "STARMESH_MOONCAKE_HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        if self.otlp:
            env.append({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": self.otlp})
        return env

    def _container(self) -> dict:
        ports = [{"name": "grpc", "containerPort": self.port, "protocol": "TCP"},
                 {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
        ports += [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in sorted(self.extra_ports.items())]
        mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "cache", "mountPath": CACHE_DIR}]
        if self.is_tls:
            mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        container = {
            "name": "starmesh", "image": self.image, "command": ["starmesh"], "args": list(self.args),
            "ports": ports, "env": self._env(), "volumeMounts": mounts,
            "readinessProbe": {**self._ready_check(), "periodSeconds": 2, "failureThreshold": 1, "timeoutSeconds": 5},
            "livenessProbe": {"tcpSocket": {"port": self.port}, "periodSeconds": 10, "failureThreshold": 6},
            # model load: tiny checkpoints take seconds, real ones minutes
            "startupProbe": {"tcpSocket": {"port": self.port}, "periodSeconds": 5, "failureThreshold": 120},
            "securityContext": {"allowPrivilegeEscalation": False},
        }
        if self.num_gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": self.num_gpus}}
        return container

    def _ready_check(self) -> dict:
        if not self.is_tls:
            return {"grpc": {"port": self.port}}
        return {"exec": {"command": ["starmesh", "health", f"127.0.0.1:{self.port}", *tls_args(True)]}}

    def _builder(self) -> dict:
        """Builds the tiny checkpoints into the pod's cache (seconds; skipped when there)."""
        code = "from cluster.checkpoints import tiny; [tiny(k, print) for k in %r]" % (list(self.tiny_kinds),)
        return {"name": "checkpoints", "image": self.image, "command": ["python", "-c", code],
                "env": [{"name": "STARMESH_CACHE", "value": CACHE_DIR}],
                "volumeMounts": [{"name": "cache", "mountPath": CACHE_DIR}],
                "securityContext": {"allowPrivilegeEscalation": False}}

    def _volumes(self) -> list[dict]:
        # the arena lives in /dev/shm: memory-backed, sized for it (sparse: pages are used
        # only as tensors are written); a container runtime's default is 64 MiB
        shm_mib = TransportConfig.arena_bytes // (1 << 20) + SHM_HEADROOM_MIB
        volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_mib}Mi"}},
                   {"name": "cache", "emptyDir": {}}]
        if self.is_tls:
            volumes.append({"name": "tls", "secret": {"secretName": TLS_SECRET, "defaultMode": 0o440}})
        return volumes
