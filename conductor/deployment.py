"""Deployment: what a deployment file says; the one schema the conductor and `starmesh up` read.

The graph says *what* runs; a deployment says *where*. Changing it never changes model
code. Files are parsed strictly by conductor/deployment_file.py: a misspelt key
(`replica:` for `replicas:`) silently ignored would place a node somewhere the operator
did not mean, so every unknown key is a GraphError naming it and where it sits.

A file has one of two shapes. Served models, what `starmesh up` launches and
`starmesh conductor` serves (compose/deployments/local.yaml)::

    name: local                    # optional, default "local"
    checkpoints:                   # optional: name -> {tiny: KIND} (built once, cached) or {path: DIR}
      omni: {tiny: qwen3-omni}
    conductor: {address: "127.0.0.1:50050", metrics: "127.0.0.1:51050"}   # optional, these defaults
    gateway: {address: "127.0.0.1:8000"}   # optional: `starmesh up` starts the OpenAI-compatible
                                   #   HTTP gateway there, in front of the conductor
    tls: {cert: mesh.pem, key: mesh.key, ca: ca.pem}   # optional: the conductor's client port and
                                   #   the gateway's link to it use TLS (mutual with ca); paths
                                   #   relative to the file; with mesh_tls: false, every server and stream
    mesh_tls: true                 # optional, default true: `starmesh up`, compose and `render
                                   #   kubernetes` give the members (services, the conductor's streams
                                   #   to them, peer links, health watches) a CA of their own and run
                                   #   mutual TLS between them (cluster/mesh_ca.py); false: no member
                                   #   certificates (plaintext, or `tls` everywhere when given)
    services:                      # required: service name -> spec; one process per replica
      thinker:
        replicas: ["127.0.0.1:50061"]   # required, >= 1 "host:port" (or "unix:/path")
        component: thinker         # the registered component it serves (cluster/registry.py);
                                   #   needed to launch it
        checkpoint: omni           # optional: a key of `checkpoints`
        options: {}                # optional mapping, passed to the component's factory as is
        device: cpu                # optional, default "cpu" (free-form: cuda:0, cpu); launched
                                   #   with --device when not the default
        components: [prefill, decode]   # optional: the graph nodes the process hosts;
                                   #   default: every node placed on it. Several = co-location.
        host_id: a                 # optional transport host id (two-host layouts)
        mooncake: false            # optional: start a Mooncake transfer engine
        transport_mode: auto       # optional: auto | inline | shm | mooncake
        nice: 8                    # optional CPU priority increment, 0..19 (default 0): on a
                                   #   shared host, stages further from the client get more
        metrics: ["127.0.0.1:51061"]   # optional: each replica's Prometheus /metrics address, on
                                   #   its host; default: gRPC port + 1000 (conductor/metrics_address.py)
    dlo_groups:                    # optional: dit replicas stepping in lockstep (conductor/dlo_group_spec.py)
      cfg: {address: "127.0.0.1:29500", world_size: 2, members: [dit, dit_uncond]}
    models:                        # required: what the conductor serves, by name
      qwen3-omni:
        pipeline: qwen3-omni       # required: a model of cluster/registry.py
        options: {chunk_size: 25}  # optional: the pipeline builder's keyword options
        placement: {prefill: thinker, decode: thinker, talker: talker, code2wav: codec}
        kv_contexts: {thinker: [prefill, decode]}   # optional
        admission: {max_in_flight: 64, max_waiting: 128}   # optional (conductor/admission.py):
                                   #   running + waiting requests; past both, RESOURCE_EXHAUSTED

One model placed on services started by other means (tests, benchmarks,
`Placement.from_yaml`; compose/deployments/toy-local.yaml): `services` as above and,
instead of `models` and `dlo_groups`::

    model: toy                     # optional: the graph it places (checked by Placement.validate)
    placement: {a: svc_a, b: svc_b, c: svc_c}
    kv_contexts: {}                # optional
    lockstep_groups:               # optional: services whose replicas step in lockstep, in
      cfg: [dit, dit_uncond]       #   rank order, one replica each (a dlo_group's members)

A `placement` maps node -> service, or node -> {default: service, walks: {walk:
service}} for a per-walk override (without `default` the node is placed only in the
walks it names). `kv_contexts` groups stateful nodes that share one request's KV
context (the graph cannot say so); conductor/placement.py keeps each on one service.

A served model's Placement holds the services its placement names plus every member
of a dlo_group it uses (the conductor pads lockstep runs to all ranks, also those the
model places nothing on); the single model's Placement holds every service of the file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from conductor.admission import AdmissionConfig
from conductor.dlo_group_spec import DloGroupSpec
from conductor.metrics_address import check_metrics, derived_metrics
from conductor.placement import Placement
from conductor.service_spec import ServiceSpec, check_endpoint
from core.errors import GraphError
from runtime.tls import TlsConfig

CHECKPOINT_KINDS = ("tiny", "path")
DEFAULT_CONDUCTOR = "127.0.0.1:50050"  # host:port a deployment's conductor binds unless it says


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class ModelSpec:
    """One model of a deployment: what builds it and where its nodes run.

    name: the served name, also the name of the graph its pipeline builds ("" in a
        single-model file without `model:`: the graph name is then not checked).
    pipeline: a model registered in cluster/registry.py; "" in a single-model file.
    node_to_service, walk_overrides, kv_contexts: its `placement` and `kv_contexts`.
    services: the services its Placement holds (module docstring), in order.
    lockstep_groups: group -> member services, in rank order.
    options: the pipeline builder's keyword options.
    admission: its request limits (conductor.admission; defaults when the file has none).
    """

    name: str
    pipeline: str
    node_to_service: Mapping[str, str]
    services: tuple[str, ...]
    walk_overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    kv_contexts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    lockstep_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)

    __hash__ = None  # mappings inside: compare by value, never hash

    def __post_init__(self) -> None:
        where = f"models.{self.name}"
        if not isinstance(self.admission, AdmissionConfig):
            raise GraphError(f"{where}: admission must be an AdmissionConfig, got {self.admission!r}")
        for key in ("name", "pipeline"):
            if not isinstance(getattr(self, key), str):
                raise GraphError(f"{where}: {key} must be a string, got {getattr(self, key)!r}")
        if isinstance(self.services, str) or not all(isinstance(s, str) for s in self.services):
            raise GraphError(f"{where}: services must be a list of service names")
        object.__setattr__(self, "services", tuple(self.services))
        if not isinstance(self.options, Mapping):
            raise GraphError(f"{where}.options must be a mapping, got {type(self.options).__name__}")
        object.__setattr__(self, "options", _frozen(self.options))
        object.__setattr__(self, "node_to_service", _frozen(self.node_to_service))
        overrides = {node: _frozen(walks) for node, walks in self.walk_overrides.items()}
        object.__setattr__(self, "walk_overrides", _frozen(overrides))
        object.__setattr__(self, "kv_contexts", _frozen({g: tuple(n) for g, n in self.kv_contexts.items()}))
        object.__setattr__(self, "lockstep_groups", _frozen({g: tuple(m) for g, m in self.lockstep_groups.items()}))


@dataclass(frozen=True)
class Deployment:
    """A whole deployment (module docstring); each model's Placement is built and
    checked once, here, so a bad file fails at load and not at the first request."""

    services: Mapping[str, ServiceSpec]
    models: Mapping[str, ModelSpec]
    name: str = "local"
    conductor: str = DEFAULT_CONDUCTOR     # host:port the conductor binds
    checkpoints: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    dlo_groups: Mapping[str, DloGroupSpec] = field(default_factory=dict)
    tls: TlsConfig | None = None          # runtime/tls.py; None: plaintext
    conductor_metrics: str = ""           # its /metrics host:port; "": derived (conductor/metrics_address.py)
    gateway: str = ""                     # host:port of the HTTP gateway `starmesh up` starts; "": none
    mesh_tls: bool = True                 # members trust only each other (module docstring)
    _placements: Mapping[str, Placement] = field(init=False, repr=False, compare=False)

    __hash__ = None  # mappings inside: compare by value, never hash

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise GraphError(f"deployment: name must be a string, got {self.name!r}")
        check_endpoint("conductor", self.conductor)
        metrics = self.conductor_metrics or derived_metrics("conductor", self.conductor)
        check_metrics("conductor", self.conductor, metrics)
        object.__setattr__(self, "conductor_metrics", metrics)
        if self.gateway:
            host, sep, port = str(self.gateway).rpartition(":")
            if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
                raise GraphError(f"gateway.address {self.gateway!r} is not 'host:port'")
        if self.tls is not None and not isinstance(self.tls, TlsConfig):
            raise GraphError(f"deployment: tls must be a runtime.tls.TlsConfig, got {type(self.tls).__name__}")
        if not isinstance(self.mesh_tls, bool):
            raise GraphError(f"deployment: mesh_tls must be true or false, got {self.mesh_tls!r}")
        object.__setattr__(self, "checkpoints", _frozen({n: _frozen(ck) for n, ck in self.checkpoints.items()}))
        object.__setattr__(self, "services", _frozen(self.services))
        object.__setattr__(self, "models", _frozen(self.models))
        object.__setattr__(self, "dlo_groups", _frozen(self.dlo_groups))
        self._check_checkpoints()
        self._check_services()
        self._check_dlo_groups()
        if not self.models:
            raise GraphError("deployment: models is empty")
        object.__setattr__(self, "_placements", _frozen({name: self._place(name) for name in self.models}))

    def bound_addresses(self) -> dict[str, str]:
        """Every address a launch of this deployment binds, keyed by where the file
        gives it ("services.thinker.metrics[0]"): gRPC, /metrics, dlo_group rendezvous."""
        out = {"conductor.address": self.conductor, "conductor.metrics": self.conductor_metrics}
        if self.gateway:
            out["gateway.address"] = self.gateway
        for name, s in self.services.items():
            out.update({f"services.{name}.replicas[{i}]": e for i, e in enumerate(s.replicas)})
            out.update({f"services.{name}.metrics[{i}]": m for i, m in enumerate(s.metrics) if m})
        out.update({f"dlo_groups.{name}.address": g.address for name, g in self.dlo_groups.items()})
        return out

    def placement(self, model: str) -> Placement:
        """Where `model`'s nodes run (checked at construction)."""
        if model not in self._placements:
            raise GraphError(f"deployment has no model {model!r} (models: {sorted(self._placements)})")
        return self._placements[model]

    # --- checks -------------------------------------------------------------------

    def _check_checkpoints(self) -> None:
        for name, ck in self.checkpoints.items():
            if len(ck) != 1 or next(iter(ck)) not in CHECKPOINT_KINDS:
                raise GraphError(f"checkpoints.{name}: give exactly one of tiny or path")
            if not isinstance(next(iter(ck.values())), str):
                raise GraphError(f"checkpoints.{name}.{next(iter(ck))} must be a string")

    def _check_services(self) -> None:
        if not self.services:
            raise GraphError("deployment: services is empty")
        for name, spec in self.services.items():
            if not isinstance(spec, ServiceSpec) or spec.name != name:
                raise GraphError(f"service {name}: spec must be a ServiceSpec named {name!r}")
            if spec.checkpoint and spec.checkpoint not in self.checkpoints:
                raise GraphError(f"services.{name}.checkpoint {spec.checkpoint!r} is not under checkpoints")

    def _check_dlo_groups(self) -> None:
        """Members are known services of one replica (a rank), each in one group only."""
        owner: dict[str, str] = {}
        for name, group in self.dlo_groups.items():
            if not isinstance(group, DloGroupSpec) or group.name != name:
                raise GraphError(f"dlo_groups.{name}: spec must be a DloGroupSpec named {name!r}")
            for member in group.members:
                service = self.services.get(member)
                if service is None:
                    raise GraphError(f"dlo_groups.{name}.members: unknown service {member!r}")
                if len(service.replicas) != 1:
                    raise GraphError(f"dlo_groups.{name}.members: service {member} has {len(service.replicas)} "
                                     "replicas; a rank is one replica (declare one service per rank)")
                if member in owner:
                    raise GraphError(f"service {member} is a member of dlo_groups {owner[member]} and {name}")
                owner[member] = name

    def _place(self, model: str) -> Placement:
        spec = self.models[model]
        if not isinstance(spec, ModelSpec) or spec.name != model:
            raise GraphError(f"models.{model}: spec must be a ModelSpec named {model!r}")
        unknown = sorted(set(spec.services) - set(self.services))
        if unknown:
            raise GraphError(f"models.{model}.placement names unknown service(s) {unknown}")
        return Placement({s: self.services[s] for s in spec.services}, spec.node_to_service,
                         spec.walk_overrides, spec.kv_contexts, spec.name, spec.lockstep_groups)
