"""Deployment files: YAML text or a path -> Deployment, strictly (schema: conductor/deployment.py).

One parser for both shapes of the file, one function per key, so a key means the same
in both. Every error is a GraphError naming the key and where it sits; the checks that
need more than one key (references between services, models and groups) are the
dataclasses' own (Deployment, ServiceSpec, DloGroupSpec, Placement).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from conductor.admission import AdmissionConfig
from conductor.capacity import CapacityConfig
from conductor.deployment import DEFAULT_CONDUCTOR, Deployment, ModelSpec
from conductor.dlo_group_spec import DloGroupSpec
from conductor.dns_replicas import DNS_KEYS, DnsReplicas
from conductor.service_spec import ServiceSpec
from core.errors import GraphError, InvalidArgument
from runtime.tls import TlsConfig, tls_config

SERVED_KEYS = ("models", "dlo_groups")                                  # served models
SINGLE_KEYS = ("model", "placement", "kv_contexts", "lockstep_groups")  # one model's placement
TOP_KEYS = {"name", "checkpoints", "conductor", "gateway", "services", "tls", "mesh_tls", *SERVED_KEYS,
            *SINGLE_KEYS}
SERVICE_KEYS = {"replicas", "device", "options", "components", "component", "checkpoint", "host_id", "mooncake",
                "transport_mode", "metrics", "nice"}
MODEL_KEYS = {"pipeline", "options", "placement", "kv_contexts", "admission"}
ADMISSION_KEYS = {"max_in_flight", "max_waiting", "min_retry_ms", "max_retry_ms", "capacity"}
CAPACITY_KEYS = {"enabled", "headroom", "window_s", "smoothing"}
NODE_KEYS = {"default", "walks"}
GROUP_KEYS = {"address", "world_size", "members", "timeout_s"}
CHECKPOINT_KEYS = {"tiny", "path"}
TLS_KEYS = ("cert", "key", "ca")
CONDUCTOR_KEYS = {"address", "metrics"}
GATEWAY_KEYS = {"address"}


def read_deployment(text_or_path: "str | Path") -> Deployment:
    """A deployment file (a Path, a "*.yaml"/"*.yml" path string, or YAML text) -> Deployment.
    Relative paths in it (tls files) are relative to the file (YAML text: to the cwd)."""
    base = Path(text_or_path).parent if _is_path(text_or_path) else Path.cwd()
    return deployment_from_dict(load_yaml(text_or_path), base)


def load_yaml(text_or_path: "str | Path") -> Any:
    """YAML text, a Path, or a path string ending in .yaml/.yml -> the parsed YAML."""
    is_path = _is_path(text_or_path)
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


def _is_path(text_or_path: "str | Path") -> bool:
    return isinstance(text_or_path, Path) or ("\n" not in text_or_path and text_or_path.endswith((".yaml", ".yml")))


def deployment_from_dict(data: Any, base_dir: "Path | None" = None) -> Deployment:
    """A parsed deployment mapping (either shape) -> Deployment; `base_dir` anchors
    relative tls paths (default: the cwd)."""
    data = _mapping(data, "deployment")
    _no_unknown(data, TOP_KEYS, "deployment")
    served = "models" in data
    for key in SINGLE_KEYS if served else ("dlo_groups",):
        if key in data:
            shape, other = ("a top-level placement", "models") if served else ("models", "a top-level placement")
            raise GraphError(f"deployment: key {key!r} goes with {shape}, not with {other}")
    if "services" not in data:
        raise GraphError("deployment: missing key 'services'")
    if not served and "placement" not in data:
        raise GraphError("deployment: missing key 'placement' (or 'models')")
    services = _services(data["services"])
    groups = _dlo_groups(data.get("dlo_groups"))
    models = _models(data["models"], groups) if served else _single_model(data, services)
    address = _mapping(data.get("conductor") or {}, "conductor")
    _no_unknown(address, CONDUCTOR_KEYS, "conductor")
    gateway = _mapping(data.get("gateway") or {}, "gateway")
    _no_unknown(gateway, GATEWAY_KEYS, "gateway")
    if "gateway" in data and "address" not in gateway:
        raise GraphError("gateway: missing key 'address' (HOST:PORT the HTTP gateway listens on)")
    return Deployment(services, models, name=str(data.get("name", "local")),
                      conductor=str(address.get("address", DEFAULT_CONDUCTOR)),
                      conductor_metrics=str(address.get("metrics", "")), gateway=str(gateway.get("address", "")),
                      checkpoints=_checkpoints(data.get("checkpoints")), dlo_groups=groups,
                      tls=_tls(data.get("tls"), base_dir or Path.cwd()), mesh_tls=data.get("mesh_tls", True))


# --- services and checkpoints ------------------------------------------------------


def _services(data: Any) -> dict[str, ServiceSpec]:
    services = _mapping(data, "deployment: services")
    if not services:
        raise GraphError("deployment: services is empty")
    return {str(name): _service(str(name), spec) for name, spec in services.items()}


def _service(name: str, data: Any) -> ServiceSpec:
    where = f"service {name}"
    data = _mapping(data, where)
    _no_unknown(data, SERVICE_KEYS, where)
    if "replicas" not in data:
        raise GraphError(f"{where}: missing key 'replicas'")
    dns = _dns_replicas(data["replicas"], f"services.{name}.replicas")
    return ServiceSpec(
        name=name,
        replicas=() if dns else _str_list(data["replicas"], f"{where}: replicas"),
        dns=dns,
        device=data.get("device", "cpu"),
        options=_mapping(data.get("options") or {}, f"{where}: options"),
        components=_str_list(data.get("components", []), f"{where}: components"),
        component=str(data.get("component", "")),
        checkpoint=str(data.get("checkpoint", "")),
        host_id=str(data.get("host_id", "")),
        mooncake=bool(data.get("mooncake", False)),
        transport_mode=str(data.get("transport_mode", "auto")),
        metrics=_str_list(data.get("metrics", []), f"{where}: metrics"),
        nice=data.get("nice", 0),
    )


def _dns_replicas(data: Any, where: str) -> "DnsReplicas | None":
    """`replicas: {dns: "name:port", refresh_s: 2, nameserver: "host:port"}` (a list is static)."""
    if not isinstance(data, Mapping):
        return None
    _no_unknown(data, DNS_KEYS, where)
    if "dns" not in data:
        raise GraphError(f"{where}: missing key 'dns' (or give a list of endpoints)")
    return DnsReplicas(data["dns"], data.get("refresh_s", 2.0), data.get("nameserver", ""), where)


def _checkpoints(data: Any) -> dict[str, dict]:
    out = {}
    for name, spec in _mapping(data or {}, "checkpoints").items():
        spec = _mapping(spec, f"checkpoints.{name}")
        _no_unknown(spec, CHECKPOINT_KEYS, f"checkpoints.{name}")
        out[str(name)] = dict(spec)
    return out


def _tls(data: Any, base_dir: Path) -> "TlsConfig | None":
    """`tls: {cert, key, ca}` -> the TlsConfig every process of the deployment uses
    (files read here: a missing one fails at load, naming its key)."""
    if data is None:
        return None
    spec = _mapping(data, "tls")
    _no_unknown(spec, set(TLS_KEYS), "tls")
    paths = {}
    for key in TLS_KEYS:
        value = spec.get(key, "")
        if not isinstance(value, str):
            raise GraphError(f"tls.{key} must be a path string, got {value!r}")
        paths[key] = str(base_dir / value) if value else ""
    try:
        config = tls_config(**paths)
    except InvalidArgument as e:
        raise GraphError(f"deployment: {e}") from None
    if config is None or not config.has_identity:
        raise GraphError("tls: every process serves, so give cert and key (and ca for mutual TLS)")
    return config


def _dlo_groups(data: Any) -> dict[str, DloGroupSpec]:
    groups = {}
    for name, spec in _mapping(data or {}, "dlo_groups").items():
        where = f"dlo_groups.{name}"
        spec = _mapping(spec, where)
        unknown = sorted(set(spec) - GROUP_KEYS)
        missing = sorted({"address", "world_size", "members"} - set(spec))
        if unknown or missing:
            raise GraphError(f"{where}: unknown key(s) {unknown}, missing {missing} (allowed: {sorted(GROUP_KEYS)})")
        members = spec["members"]
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members) or not members:
            raise GraphError(f"{where}.members must be a non-empty list of service names")
        groups[str(name)] = DloGroupSpec(str(name), str(spec["address"]), spec["world_size"], tuple(members),
                                         spec.get("timeout_s", 60.0))
    return groups


# --- models ------------------------------------------------------------------------


def _models(data: Any, groups: Mapping[str, DloGroupSpec]) -> dict[str, ModelSpec]:
    models = _mapping(data, "deployment: models")
    if not models:
        raise GraphError("deployment: models is empty")
    return {str(name): _model(str(name), spec, groups) for name, spec in models.items()}


def _model(name: str, data: Any, groups: Mapping[str, DloGroupSpec]) -> ModelSpec:
    """One served model; its services: those its placement names plus every member of
    a dlo_group it uses (the conductor pads lockstep runs to all of a group's ranks)."""
    where = f"models.{name}"
    data = _mapping(data, where)
    _no_unknown(data, MODEL_KEYS, where)
    for key in ("pipeline", "placement"):
        if key not in data:
            raise GraphError(f"{where}: missing key {key!r}")
    defaults, overrides = _placement(data["placement"], f"{where}: ")
    named = set(defaults.values()) | {s for walks in overrides.values() for s in walks.values()}
    lockstep = {g.name: g.members for g in groups.values() if named & set(g.members)}
    services = sorted(named | {s for members in lockstep.values() for s in members})
    return ModelSpec(name, str(data["pipeline"]), defaults, tuple(services), overrides,
                     _kv_contexts(data.get("kv_contexts"), f"{where}: "), lockstep,
                     _mapping(data.get("options") or {}, f"{where}.options"),
                     _admission(data.get("admission"), where))


def _admission(data: Any, where: str) -> AdmissionConfig:
    """A model's `admission:` limits; absent: the defaults."""
    if data is None:
        return AdmissionConfig()
    data = _mapping(data, f"{where}.admission")
    _no_unknown(data, ADMISSION_KEYS, f"{where}.admission")
    fields = {str(k): v for k, v in data.items()}
    try:
        if "capacity" in fields:
            capacity = _mapping(fields["capacity"], f"{where}.admission.capacity")
            _no_unknown(capacity, CAPACITY_KEYS, f"{where}.admission.capacity")
            fields["capacity"] = CapacityConfig(**{str(k): v for k, v in capacity.items()})
        return AdmissionConfig(**fields)
    except ValueError as exc:
        raise GraphError(f"{where}: {exc}") from exc


def _single_model(data: Mapping, services: Mapping[str, ServiceSpec]) -> dict[str, ModelSpec]:
    """The top-level placement: one model, on every service of the file."""
    model = data.get("model", "")
    if not isinstance(model, str):
        raise GraphError(f"deployment: model must be a string, got {model!r}")
    defaults, overrides = _placement(data["placement"], "")
    kv = _kv_contexts(data.get("kv_contexts"), "")
    groups = _mapping(data.get("lockstep_groups") or {}, "deployment: lockstep_groups")
    lockstep = {str(g): _str_list(members, f"lockstep group {g}") for g, members in groups.items()}
    return {model: ModelSpec(model, "", defaults, tuple(services), overrides, kv, lockstep)}


def _placement(data: Any, prefix: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """`placement:` -> (node -> default service, node -> {walk: service})."""
    defaults: dict[str, str] = {}
    overrides: dict[str, dict[str, str]] = {}
    for node, entry in _mapping(data, f"{prefix or 'deployment: '}placement").items():
        _node(str(node), entry, defaults, overrides, f"{prefix}placement {node}")
    return defaults, overrides


def _node(node: str, entry: Any, defaults: dict, overrides: dict, where: str) -> None:
    """One `placement:` entry: a service name, or {default: service, walks: {walk: service}}."""
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


def _kv_contexts(data: Any, prefix: str) -> dict[str, tuple[str, ...]]:
    groups = _mapping(data or {}, f"{prefix or 'deployment: '}kv_contexts")
    return {str(g): _str_list(nodes, f"{prefix}kv_context {g}") for g, nodes in groups.items()}


# --- shapes ------------------------------------------------------------------------


def _mapping(value: Any, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise GraphError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _no_unknown(data: Mapping, allowed: set[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise GraphError(f"{where}: unknown key {key!r} (allowed: {sorted(allowed)})")


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise GraphError(f"{where} must be a list, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise GraphError(f"{where}: {item!r} is not a string")
    return tuple(value)
