"""Placement: where each node of a walk graph runs, for one model.

`Placement.service_for(node, walk)` is the placement function pi(node, walk) ->
ranks: a service, whose replicas are the ranks (`conductor.replicas.ReplicaSelector`
picks one per request). Deployment files and their schema: conductor/deployment.py;
`from_dict`/`from_yaml` read one model's placement from one.

KV-context rule (KV transfer between replicas is not supported, so a request's
context must never be split): in every walk that runs it, a stateful node
(`GraphNode.stateful`) resolves to the same service, and all nodes of one
`kv_contexts` group resolve to one service. Inside that service the
`ReplicaSelector` pins a request to one replica for all its stateful nodes, so
one request's context lives on exactly one replica.

Checks split in two: `Placement(...)` itself rejects what is wrong without a
graph (unknown service, duplicate endpoint, no replica, a node placed on a
service whose `components` omit it); `validate(graph)` checks it against a graph.
Every error is a `core.errors.GraphError` naming the node, service or walk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from conductor.service_spec import ServiceSpec
from core.errors import GraphError
from graph.node import check_name

NO_KV_TRANSFER = "KV transfer between replicas is not supported"


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Placement:
    """Node -> service, optionally per walk; immutable once built.

    services: name -> ServiceSpec. node_to_service: node -> default service.
    walk_overrides: node -> {walk: service}, consulted before the default.
    kv_contexts: group -> nodes sharing one request's KV context (kept on one service).
    model: the graph this placement is for ("" = unchecked).
    """

    services: Mapping[str, ServiceSpec]
    node_to_service: Mapping[str, str]
    walk_overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    kv_contexts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    model: str = ""
    lockstep_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    __hash__ = None  # mappings inside: compare by value, never hash

    def __post_init__(self) -> None:
        object.__setattr__(self, "services", _frozen(self.services))
        object.__setattr__(self, "node_to_service", _frozen(self.node_to_service))
        overrides = {node: _frozen(walks) for node, walks in self.walk_overrides.items()}
        object.__setattr__(self, "walk_overrides", _frozen(overrides))
        groups = {name: tuple(nodes) for name, nodes in self.kv_contexts.items()}
        object.__setattr__(self, "kv_contexts", _frozen(groups))
        lockstep = {name: tuple(members) for name, members in self.lockstep_groups.items()}
        object.__setattr__(self, "lockstep_groups", _frozen(lockstep))
        self._check_services()
        self._check_references()
        self._check_kv_groups()
        self._check_lockstep_groups()

    # --- construction -------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping) -> "Placement":
        """One model's placement from a parsed deployment mapping (either shape of
        conductor/deployment.py; a `models:` deployment must hold exactly one model)."""
        from conductor.deployment_file import deployment_from_dict  # it imports us

        return _only_model(deployment_from_dict(data))

    @classmethod
    def from_yaml(cls, text_or_path: "str | Path") -> "Placement":
        """Parses a deployment: a Path, a "*.yaml"/"*.yml" path string, or YAML text."""
        from conductor.deployment_file import read_deployment

        return _only_model(read_deployment(text_or_path))

    # --- lookups ------------------------------------------------------------------

    def service_name_for(self, node: str, walk: str) -> str:
        """pi(node, walk): the service that runs `node` in `walk` (override, then default)."""
        name = self.walk_overrides.get(node, {}).get(walk) or self.node_to_service.get(node)
        if name is None:
            raise GraphError(f"unplaced node {node} in walk {walk}")
        return name

    def service_for(self, node: str, walk: str) -> ServiceSpec:
        """pi(node, walk) as the ServiceSpec whose replicas may run `node` in `walk`."""
        return self.services[self.service_name_for(node, walk)]

    def is_colocated(self, node_a: str, node_b: str, walk: str) -> bool:
        """Same service in `walk`: an edge between them is handed over in-process
        (on one replica: see ReplicaSelector for how a request keeps to it)."""
        return self.service_name_for(node_a, walk) == self.service_name_for(node_b, walk)

    def components_of(self, service: str) -> tuple[str, ...]:
        """The nodes the service's process hosts: its `components`, or else every
        node placed on it (by default or in some walk), in placement order."""
        spec = self.services[service]
        if spec.components:
            return spec.components
        return tuple(dict.fromkeys(node for node, _walk, name in self._assignments() if name == service))

    def kv_context_of(self, node: str) -> str | None:
        """The kv_contexts group that holds `node`, if any."""
        return next((g for g, nodes in self.kv_contexts.items() if node in nodes), None)

    # --- checks -------------------------------------------------------------------

    def _assignments(self):
        """Every (node, walk, service) the placement states; walk None = the default."""
        for node, service in self.node_to_service.items():
            yield node, None, service
        for node, walks in self.walk_overrides.items():
            for walk, service in walks.items():
                yield node, walk, service

    def _check_services(self) -> None:
        owner: dict[str, str] = {}
        for name, spec in self.services.items():
            if not isinstance(spec, ServiceSpec) or spec.name != name:
                raise GraphError(f"service {name}: spec must be a ServiceSpec named {name!r}")
            for endpoint in spec.replicas:
                if endpoint in owner:
                    raise GraphError(f"duplicate port/endpoint {endpoint} in services {owner[endpoint]} and {name}")
                owner[endpoint] = name

    def _check_references(self) -> None:
        for node, walk, service in self._assignments():
            check_name("placed node", node)
            where = f"node {node}" if walk is None else f"node {node} in walk {walk}"
            if service not in self.services:
                raise GraphError(f"{where}: unknown service {service}")
            hosted = self.services[service].components
            if hosted and node not in hosted:
                raise GraphError(
                    f"{where}: placed on service {service}, which does not host it (components: {list(hosted)})"
                )

    def _check_kv_groups(self) -> None:
        owner: dict[str, str] = {}
        for group, nodes in self.kv_contexts.items():
            check_name("kv_context", group)
            if not nodes:
                raise GraphError(f"kv_context {group}: lists no nodes")
            for node in nodes:
                if node in owner:
                    raise GraphError(f"node {node} is in kv_contexts {owner[node]} and {group}")
                owner[node] = group

    def _check_lockstep_groups(self) -> None:
        """Each member is a known service of one replica (a rank), in one group only."""
        owner: dict[str, str] = {}
        for group, members in self.lockstep_groups.items():
            check_name("lockstep group", group)
            if not members:
                raise GraphError(f"lockstep group {group}: lists no services")
            for service in members:
                if service not in self.services:
                    raise GraphError(f"lockstep group {group}: unknown service {service}")
                if len(self.services[service].replicas) != 1:
                    raise GraphError(f"lockstep group {group}: service {service} has "
                                     f"{len(self.services[service].replicas)} replicas; a rank is one replica")
                if service in owner:
                    raise GraphError(f"service {service} is in lockstep groups {owner[service]} and {group}")
                owner[service] = group

    def validate(self, graph) -> None:
        """Checks this placement against `graph` (a graph.walk.WalkGraph): the model
        name, that every name it uses exists there, that every node of every walk is
        placed, and the KV-context rule (module docstring). Raises GraphError."""
        if self.model and self.model != graph.name:
            raise GraphError(f"deployment is for model {self.model}, graph is {graph.name}")
        self._check_names(graph)
        for walk in graph.walks:
            for node in walk.node_names:
                self.service_name_for(node, walk.name)  # raises "unplaced node X in walk Y"
        for node in graph.nodes:
            if node.stateful:
                self._check_one_service(graph, (node.name,), f"stateful node {node.name}")
        for group, nodes in self.kv_contexts.items():
            self._check_one_service(graph, nodes, f"kv_context {group}")

    def _check_names(self, graph) -> None:
        for node, walk, _service in self._assignments():
            if node not in graph.node_by_name:
                raise GraphError(f"placement names node {node}, which graph {graph.name} does not have")
            if walk is not None and walk not in graph.walk_by_name:
                raise GraphError(f"node {node}: override for unknown walk {walk}")
            if walk is not None and node not in graph.walk_by_name[walk].node_names:
                raise GraphError(f"node {node}: override for walk {walk}, which does not run it")
        for spec in self.services.values():
            for node in spec.components:
                if node not in graph.node_by_name:
                    raise GraphError(f"service {spec.name}: component {node} is not a node of graph {graph.name}")
        for group, nodes in self.kv_contexts.items():
            for node in nodes:
                if node not in graph.node_by_name:
                    raise GraphError(f"kv_context {group}: unknown node {node}")
                if not graph.node_by_name[node].stateful:
                    raise GraphError(f"kv_context {group}: node {node} is not stateful (it holds no KV context)")

    def _check_one_service(self, graph, nodes: tuple[str, ...], what: str) -> None:
        """Every walk run of `nodes` resolves to one service, else a request's KV
        context would be split between services."""
        first = None  # (node, walk, service) of the first run seen
        for walk in graph.walks:
            for node in nodes:
                if node not in walk.node_names:
                    continue
                service = self.service_name_for(node, walk.name)
                if first is None:
                    first = (node, walk.name, service)
                elif service != first[2]:
                    other = "" if node == first[0] else f"{node} "
                    raise GraphError(
                        f"{what}: {first[0]} runs on service {first[2]} in walk {first[1]} but "
                        f"{other}on service {service} in walk {walk.name}; one request's KV context "
                        f"would be split across services ({NO_KV_TRANSFER}): place {', '.join(nodes)} "
                        "on one service in every walk"
                    )


def _only_model(deployment) -> Placement:
    if len(deployment.models) != 1:
        raise GraphError(f"deployment has models {sorted(deployment.models)}: a Placement is one model's "
                         "(Deployment.placement(model) picks one)")
    return deployment.placement(next(iter(deployment.models)))
