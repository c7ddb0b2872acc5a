"""The deployment files shipped with starmesh (cluster/deployment_dir.py), rewritten for one run (tests,
benchmarks): free ports (replicas, the conductor, their /metrics, dlo_group rendezvous), given
checkpoints, and optionally only some models (fewer processes on a small machine; a
dlo_group a kept model uses keeps every member)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from cluster.deployment_dir import SHIPPED_DIR
from cluster.launcher import free_ports
from conductor.deployment_file import deployment_from_dict, load_yaml


def rewrite_shipped(name: str, checkpoints: dict[str, str], models: tuple[str, ...] | None = None,
                    directory: str | None = None) -> Path:
    """compose/deployments/NAME.yaml rewritten (module docstring) into a new file in
    `directory`; checkpoints: checkpoint name -> directory, for every one kept."""
    data = load_yaml(SHIPPED_DIR / f"{name}.yaml")
    deployment = deployment_from_dict(data)
    groups = data.get("dlo_groups") or {}
    if models is not None:
        data["models"] = {m: v for m, v in data["models"].items() if m in models}
        used = {s for m in data["models"] for s in deployment.models[m].services}  # with dlo_group members
        groups = {g: v for g, v in groups.items() if used & set(v["members"])}
        data["services"] = {s: v for s, v in data["services"].items() if s in used}
        ckpts = {v.get("checkpoint") for v in data["services"].values()}
        data["checkpoints"] = {k: v for k, v in data["checkpoints"].items() if k in ckpts}
    data["checkpoints"] = {k: {"path": checkpoints[k]} for k in data["checkpoints"]}
    if groups:
        data["dlo_groups"] = groups
    else:
        data.pop("dlo_groups", None)
    return write_deployment(with_free_ports(data), directory)


def with_free_ports(data: dict) -> dict:
    """A deployment mapping whose conductor, gateway, replicas, their /metrics and
    dlo_group rendezvous are on distinct free loopback ports (a derived metrics port,
    gRPC + 1000, is not known to be free)."""
    groups = data.get("dlo_groups") or {}
    ports = iter(free_ports(3 + 2 * sum(len(spec["replicas"]) for spec in data["services"].values()) + len(groups)))

    def free() -> str:
        return f"127.0.0.1:{next(ports)}"

    services = {name: {**spec, "replicas": [free() for _ in spec["replicas"]],
                       "metrics": [free() for _ in spec["replicas"]]} for name, spec in data["services"].items()}
    out = {**data, "conductor": {"address": free(), "metrics": free()}, "services": services}
    if groups:
        out["dlo_groups"] = {g: {**v, "address": free()} for g, v in groups.items()}
    if "gateway" in data:
        out["gateway"] = {"address": free()}
    return out


def write_deployment(data: dict, directory: str | None = None) -> Path:
    """A deployment mapping as a new YAML file in `directory` (default: the temp directory)."""
    fd, path = tempfile.mkstemp(prefix="starmesh-deploy-", suffix=".yaml", dir=directory)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return Path(path)
