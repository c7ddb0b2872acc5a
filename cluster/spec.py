"""A cluster deployment file: which processes `starmesh up` starts and what they serve.

    name: local
    checkpoints:                   # name -> {tiny: KIND} (built once, cached) or {path: DIR}
      omni: {tiny: qwen3-omni}
    conductor: {address: "127.0.0.1:50050"}
    services:                      # one process per replica
      thinker:
        component: thinker         # a registered component (services/registry.py)
        checkpoint: omni
        replicas: ["127.0.0.1:50061"]
        options: {}                # --option KEY=VALUE for its factory
        host_id: a                 # optional transport host id (two-host layouts)
        mooncake: false            # optional: start a Mooncake transfer engine
    dlo_groups:                    # optional: dit replicas stepping in lockstep (cluster/dlo_groups.py)
      cfg: {address: "127.0.0.1:29500", world_size: 2, members: [dit, dit_uncond]}
    models:                        # what the conductor serves
      qwen3-omni:
        pipeline: qwen3_omni       # pipelines/registry.py
        options: {chunk_size: 25, left_context: 25, first_chunk: 4}
        placement: {prefill: thinker, decode: thinker, talker: talker, code2wav: codec}
        kv_contexts: {thinker: [prefill, decode]}

Strict: an unknown key is an error naming it (a typo must not place a node elsewhere).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cluster.dlo_groups import DloGroupSpec, check_dlo_groups, parse_dlo_groups
from conductor.deployment import load_yaml
from conductor.placement import Placement, check_endpoint
from core.errors import GraphError

TOP = {"name", "checkpoints", "conductor", "services", "models", "dlo_groups"}
SERVICE = {"component", "checkpoint", "replicas", "options", "host_id", "mooncake", "transport_mode"}
MODEL = {"pipeline", "options", "placement", "kv_contexts"}


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    component: str
    replicas: tuple[str, ...]
    checkpoint: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    host_id: str = ""
    mooncake: bool = False
    transport_mode: str = "auto"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    pipeline: str
    placement: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    kv_contexts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    conductor: str                          # host:port of the conductor
    checkpoints: Mapping[str, Mapping[str, str]]
    services: Mapping[str, ServiceSpec]
    models: Mapping[str, ModelSpec]
    dlo_groups: Mapping[str, DloGroupSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_endpoint("conductor", self.conductor)
        for s in self.services.values():
            if s.checkpoint and s.checkpoint not in self.checkpoints:
                raise GraphError(f"services.{s.name}.checkpoint {s.checkpoint!r} is not under checkpoints")
        check_dlo_groups(self.dlo_groups, self.services)
        for m in self.models.values():
            self.placement(m.name)  # validates services and nodes now, not at first request

    def placement(self, model: str) -> Placement:
        """The model's services, plus every member of a dlo_group it uses: the conductor
        pads lockstep runs to all ranks, also those the model places nothing on."""
        m = self.models[model]
        unknown = sorted({str(s) for s in _services_of(m.placement)} - set(self.services))
        if unknown:
            raise GraphError(f"models.{model}.placement names unknown service(s) {unknown}")
        used = _services_of(m.placement)
        groups = {g.name: list(g.members) for g in self.dlo_groups.values() if used & set(g.members)}
        used |= {s for members in groups.values() for s in members}
        services = {s: {"replicas": list(self.services[s].replicas)} for s in sorted(used)}
        return Placement.from_dict({"services": services, "placement": dict(m.placement),
                                    "kv_contexts": dict(m.kv_contexts), "lockstep_groups": groups})

    @classmethod
    def load(cls, text_or_path: "str | Path") -> "ClusterSpec":
        return cluster_from_dict(load_yaml(text_or_path))


def _services_of(placement: Mapping[str, Any]) -> set[str]:
    out = set()
    for value in placement.values():
        if isinstance(value, Mapping):
            out |= {v for k, v in value.items() if k == "default"}
            out |= set((value.get("walks") or {}).values())
        else:
            out.add(value)
    return out


def _mapping(value, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise GraphError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _strict(data: Mapping, allowed: set[str], where: str) -> Mapping:
    data = _mapping(data, where)
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise GraphError(f"{where}: unknown key(s) {unknown} (allowed: {sorted(allowed)})")
    return data


def _service(name: str, data: Mapping) -> ServiceSpec:
    where = f"services.{name}"
    data = _strict(data, SERVICE, where)
    if "component" not in data or "replicas" not in data:
        raise GraphError(f"{where}: needs component and replicas")
    replicas = data["replicas"]
    if not isinstance(replicas, list) or not replicas:
        raise GraphError(f"{where}.replicas must be a non-empty list of host:port")
    for r in replicas:
        check_endpoint(name, r)
    return ServiceSpec(name, str(data["component"]), tuple(replicas), str(data.get("checkpoint", "")),
                       dict(_mapping(data.get("options") or {}, f"{where}.options")), str(data.get("host_id", "")),
                       bool(data.get("mooncake", False)), str(data.get("transport_mode", "auto")))


def _model(name: str, data: Mapping) -> ModelSpec:
    where = f"models.{name}"
    data = _strict(data, MODEL, where)
    if "pipeline" not in data or "placement" not in data:
        raise GraphError(f"{where}: needs pipeline and placement")
    return ModelSpec(name, str(data["pipeline"]), dict(_mapping(data["placement"], f"{where}.placement")),
                     dict(_mapping(data.get("options") or {}, f"{where}.options")),
                     dict(_mapping(data.get("kv_contexts") or {}, f"{where}.kv_contexts")))


def cluster_from_dict(data: Mapping) -> ClusterSpec:
    data = _strict(data, TOP, "deployment")
    checkpoints = {}
    for name, ck in _mapping(data.get("checkpoints") or {}, "checkpoints").items():
        ck = _strict(ck, {"tiny", "path"}, f"checkpoints.{name}")
        if len(ck) != 1:
            raise GraphError(f"checkpoints.{name}: give exactly one of tiny or path")
        checkpoints[name] = dict(ck)
    conductor = _strict(data.get("conductor") or {}, {"address"}, "conductor").get("address", "127.0.0.1:50050")
    services = {n: _service(n, s) for n, s in _mapping(data.get("services") or {}, "services").items()}
    models = {n: _model(n, m) for n, m in _mapping(data.get("models") or {}, "models").items()}
    if not services or not models:
        raise GraphError("deployment: needs at least one service and one model")
    return ClusterSpec(str(data.get("name", "local")), str(conductor), checkpoints, services, models,
                       parse_dlo_groups(data.get("dlo_groups")))
