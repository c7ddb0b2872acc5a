"""The shipped deployment files, rewritten for one run (tests, benchmarks): free ports
(replicas and dlo_group rendezvous), given checkpoints, and optionally only some models
(fewer processes on a small machine; a dlo_group a kept model uses keeps every member)."""
from __future__ import annotations

from pathlib import Path

import yaml

from cluster.launcher import free_port, write_deployment

DEPLOYMENTS = Path(__file__).resolve().parents[1] / "compose" / "deployments"


def rewrite(name: str, checkpoints: dict[str, str], models: tuple[str, ...] | None = None,
            directory: str | None = None) -> Path:
    data = yaml.safe_load((DEPLOYMENTS / f"{name}.yaml").read_text())
    groups = data.get("dlo_groups") or {}
    if models is not None:
        data["models"] = {m: v for m, v in data["models"].items() if m in models}
        used = {s for m in data["models"].values() for s in m["placement"].values()}
        groups = {g: v for g, v in groups.items() if used & set(v["members"])}  # a used group keeps every rank
        used |= {s for v in groups.values() for s in v["members"]}
        data["services"] = {s: v for s, v in data["services"].items() if s in used}
        ckpts = {v["checkpoint"] for v in data["services"].values()}
        data["checkpoints"] = {k: v for k, v in data["checkpoints"].items() if k in ckpts}
    data["checkpoints"] = {k: {"path": checkpoints[k]} for k in data["checkpoints"]}
    data["conductor"] = {"address": f"127.0.0.1:{free_port()}"}
    for spec in data["services"].values():
        spec["replicas"] = [f"127.0.0.1:{free_port()}" for _ in spec["replicas"]]
    if groups:
        data["dlo_groups"] = {g: {**v, "address": f"127.0.0.1:{free_port()}"} for g, v in groups.items()}
    else:
        data.pop("dlo_groups", None)
    return write_deployment(data, directory)
