"""How a deployment's names and addresses look inside a cluster.

A service `orpheus_lm` becomes the Kubernetes name `orpheus-lm` (DNS-1035: lower case,
digits and '-'), its pods are found at the headless Service's name
`orpheus-lm.NS.svc.cluster.local` (one A record per ready pod), and every replica of it
serves on the port of its first listed endpoint: A records carry no port.
"""
from __future__ import annotations

import re

from conductor.service_spec import ServiceSpec
from core.errors import GraphError

METRICS_PORT = 9464  # every pod serves /metrics here, in its own network namespace
CLUSTER_DOMAIN = "svc.cluster.local"
TLS_DIR = "/etc/starmesh/tls"
MESH_DIR = "/etc/starmesh/mesh"  # the members' CA and certificate (the generated Secret)
CONFIG_DIR = "/etc/starmesh"
CACHE_DIR = "/cache"


def k8s_name(name: str) -> str:
    """A deployment name as a DNS-1035 label (GraphError when nothing is left of it)."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    label = re.sub(r"^[^a-z]+", "", label)[:63].rstrip("-")
    if not label:
        raise GraphError(f"service {name!r}: no Kubernetes name can be made of it")
    return label


def service_port(spec: ServiceSpec) -> int:
    """The one port every replica of `spec` serves on in the cluster."""
    if not spec.replicas or spec.replicas[0].startswith("unix:"):
        raise GraphError(f"services.{spec.name}.replicas: a cluster needs a 'host:port' endpoint to take the "
                         "port from")
    return int(spec.replicas[0].rpartition(":")[2])


def service_host(name: str, namespace: str) -> str:
    """The headless Service's name: one A record per ready pod of service `name`."""
    return f"{k8s_name(name)}.{namespace}.{CLUSTER_DOMAIN}"


def pod_host(name: str, namespace: str, ordinal: int = 0) -> str:
    """A StatefulSet pod's stable name (a lockstep rank keeps its identity)."""
    return f"{k8s_name(name)}-{ordinal}.{service_host(name, namespace)}"
