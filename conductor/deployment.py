"""Deployment files: strict parsing of the YAML schema in conductor/placement.py.

Strict on purpose: a misspelt key (`replica:` for `replicas:`) silently ignored
would place a node somewhere the operator did not mean. Every error is a
GraphError naming the key and where it sits.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import yaml

from conductor.placement import Placement, ServiceSpec
from core.errors import GraphError

TOP_KEYS = {"model", "services", "placement", "kv_contexts", "lockstep_groups"}
SERVICE_KEYS = {"replicas", "device", "options", "components"}
NODE_KEYS = {"default", "walks"}


def load_yaml(text_or_path: "str | Path") -> Mapping:
    """YAML text, a Path, or a path string ending in .yaml/.yml -> the parsed mapping."""
    is_path = isinstance(text_or_path, Path) or (
        "\n" not in text_or_path and text_or_path.endswith((".yaml", ".yml"))
    )
    source = str(text_or_path) if is_path else "deployment"
    if is_path:
        try:
            text = Path(text_or_path).read_text()
        except OSError as exc:
            raise GraphError(f"deployment file {text_or_path}: {exc.strerror or exc}") from exc
    else:
        text = text_or_path
    try:
        return yaml.safe_load(text)  # safe_load: a deployment file never builds objects
    except yaml.YAMLError as exc:
        raise GraphError(f"{source}: invalid YAML: {exc}") from exc


def _mapping(value, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise GraphError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _no_unknown(data: Mapping, allowed: set[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise GraphError(f"{where}: unknown key {key!r} (allowed: {sorted(allowed)})")


def _str_list(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise GraphError(f"{where} must be a list, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise GraphError(f"{where}: {item!r} is not a string")
    return tuple(value)


def _service(name: str, data) -> ServiceSpec:
    where = f"service {name}"
    data = _mapping(data, where)
    _no_unknown(data, SERVICE_KEYS, where)
    if "replicas" not in data:
        raise GraphError(f"{where}: missing key 'replicas'")
    return ServiceSpec(
        name=name,
        replicas=_str_list(data["replicas"], f"{where}: replicas"),
        device=data.get("device", "cpu"),
        options=_mapping(data.get("options") or {}, f"{where}: options"),
        components=_str_list(data.get("components", []), f"{where}: components"),
    )


def _node(node: str, entry, defaults: dict, overrides: dict) -> None:
    """One `placement:` entry: a service name, or {default: service, walks: {walk: service}}."""
    where = f"placement {node}"
    if isinstance(entry, str):
        defaults[node] = entry
        return
    entry = _mapping(entry, f"{where} (a service name or a mapping)")
    _no_unknown(entry, NODE_KEYS, where)
    if not entry:
        raise GraphError(f"{where}: names no service")
    if "default" in entry:
        if not isinstance(entry["default"], str):
            raise GraphError(f"{where}: default must be a service name")
        defaults[node] = entry["default"]
    walks = _mapping(entry.get("walks") or {}, f"{where}: walks")
    for walk, service in walks.items():
        if not isinstance(service, str):
            raise GraphError(f"{where}: walk {walk} must name a service, got {service!r}")
    if walks:
        overrides[node] = dict(walks)


def placement_from_dict(data) -> Placement:
    """A parsed deployment mapping -> Placement (the schema: conductor/placement.py)."""
    data = _mapping(data, "deployment")
    _no_unknown(data, TOP_KEYS, "deployment")
    for key in ("services", "placement"):
        if key not in data:
            raise GraphError(f"deployment: missing key {key!r}")
    services = _mapping(data["services"], "deployment: services")
    if not services:
        raise GraphError("deployment: services is empty")
    specs = {str(name): _service(str(name), spec) for name, spec in services.items()}
    defaults: dict[str, str] = {}
    overrides: dict[str, dict[str, str]] = {}
    for node, entry in _mapping(data["placement"], "deployment: placement").items():
        _node(str(node), entry, defaults, overrides)
    groups = _mapping(data.get("kv_contexts") or {}, "deployment: kv_contexts")
    kv = {str(g): _str_list(nodes, f"kv_context {g}") for g, nodes in groups.items()}
    lockstep = _mapping(data.get("lockstep_groups") or {}, "deployment: lockstep_groups")
    lockstep = {str(g): _str_list(members, f"lockstep group {g}") for g, members in lockstep.items()}
    model = data.get("model", "")
    if not isinstance(model, str):
        raise GraphError(f"deployment: model must be a string, got {model!r}")
    return Placement(specs, defaults, overrides, kv, model, lockstep)
