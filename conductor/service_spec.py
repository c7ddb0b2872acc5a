"""ServiceSpec: one service of a deployment, its replicas and what runs on them.

The same object serves the conductor (where to send a node's runs: `replicas`,
`components`) and `starmesh up` (what to launch: `component`, `checkpoint`, transport
flags). Keys and defaults: conductor/deployment.py.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from conductor.dns_replicas import DnsReplicas
from conductor.metrics_address import check_metrics, derived_metrics
from core.errors import GraphError
from core.priority import MAX_NICE, is_nice
from graph.node import check_name


def check_endpoint(service: str, endpoint) -> None:
    """A replica endpoint is "host:port" (port 1..65535) or "unix:/path"."""
    if not isinstance(endpoint, str):
        raise GraphError(f"service {service}: replica endpoint {endpoint!r} is not a string")
    if endpoint.startswith("unix:") and len(endpoint) > len("unix:"):
        return
    host, sep, port = endpoint.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise GraphError(f"service {service}: replica endpoint {endpoint!r} is not 'host:port'")


@dataclass(frozen=True)
class ServiceSpec:
    """One service: its running replicas and what each replica process hosts.

    components: the graph nodes the process hosts (several = co-location); empty means
        "whatever the placement puts here" (see Placement.components_of).
    component: the registered factory `starmesh serve` runs (cluster/registry.py),
        e.g. "talker+codec"; "" for a service started by other means (tests, in-process).
    device: passed to the factory when it is not the default "cpu".
    checkpoint: a key of the deployment's `checkpoints` ("" = none).
    host_id, mooncake, transport_mode: the process's transport flags.
    nice: its processes' CPU priority increment, 0..19 (`starmesh serve --nice`): on a
        host whose cores a pipeline's services share, the stages further from the client
        yield to those nearer it.
    metrics: each replica's Prometheus /metrics address, in replica order; empty means
        the derived ones (conductor/metrics_address.py), which it then holds.
    dns: replicas that come and go (conductor/dns_replicas.py); `replicas` is then empty
        and the conductor adds and drains replicas as the name's records change. Such a
        service is launched by its cluster (Kubernetes), never by `starmesh up`.
    """

    name: str
    replicas: tuple[str, ...]
    device: str = "cpu"
    options: Mapping = field(default_factory=dict, hash=False)
    components: tuple[str, ...] = ()
    component: str = ""
    checkpoint: str = ""
    host_id: str = ""
    mooncake: bool = False
    transport_mode: str = "auto"
    metrics: tuple[str, ...] = ()
    dns: DnsReplicas | None = None
    nice: int = 0

    def __post_init__(self) -> None:
        check_name("service", self.name)
        self._check_replicas()
        self._check_metrics()
        for key in ("device", "component", "checkpoint", "host_id", "transport_mode"):
            if not isinstance(getattr(self, key), str):
                raise GraphError(f"service {self.name}: {key} must be a string, got {getattr(self, key)!r}")
        if not self.device:
            raise GraphError(f"service {self.name}: device must be a non-empty string")
        if not is_nice(self.nice):
            raise GraphError(f"service {self.name}: nice must be an int in [0, {MAX_NICE}], got {self.nice!r}")
        if not isinstance(self.mooncake, bool):
            raise GraphError(f"service {self.name}: mooncake must be true or false, got {self.mooncake!r}")
        if not isinstance(self.options, Mapping):
            raise GraphError(f"service {self.name}: options must be a mapping")
        # A private deep copy: the caller's dict can change later, ours never does.
        object.__setattr__(self, "options", MappingProxyType(copy.deepcopy(dict(self.options))))
        object.__setattr__(self, "components", tuple(self.components))
        for node in self.components:
            check_name(f"service {self.name} component", node)
        if len(set(self.components)) != len(self.components):
            raise GraphError(f"service {self.name}: duplicate component in {list(self.components)}")

    def _check_replicas(self) -> None:
        if isinstance(self.replicas, str):  # a bare string would iterate per character
            raise GraphError(f"service {self.name}: replicas must be a list of endpoints")
        object.__setattr__(self, "replicas", tuple(self.replicas))
        if self.dns is not None:
            if not isinstance(self.dns, DnsReplicas):
                raise GraphError(f"service {self.name}: dns must be a DnsReplicas, got {type(self.dns).__name__}")
            if self.replicas or self.metrics:
                raise GraphError(f"service {self.name}: replicas come from dns {self.dns.dns}; "
                                 "list no replicas or metrics addresses beside it")
            return
        if not self.replicas:
            raise GraphError(f"service {self.name}: needs at least one replica")
        seen = set()
        for endpoint in self.replicas:
            check_endpoint(self.name, endpoint)
            if endpoint in seen:
                raise GraphError(f"duplicate endpoint {endpoint} in service {self.name}")
            seen.add(endpoint)

    def _check_metrics(self) -> None:
        where = f"service {self.name}"
        if isinstance(self.metrics, str):
            raise GraphError(f"{where}: metrics must be a list of 'host:port', one per replica")
        metrics = tuple(self.metrics) or tuple(derived_metrics(where, e) for e in self.replicas)
        if len(metrics) != len(self.replicas):
            raise GraphError(f"{where}: metrics names {len(metrics)} address(es) for {len(self.replicas)} "
                             "replica(s); give one per replica, in replica order")
        for endpoint, address in zip(self.replicas, metrics):
            check_metrics(where, endpoint, address)
        named = [m for m in metrics if m]
        if len(set(named)) != len(named):
            raise GraphError(f"{where}: duplicate metrics address in {list(named)}")
        object.__setattr__(self, "metrics", metrics)
