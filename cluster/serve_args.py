"""The `starmesh serve` flags a deployment gives one service's replicas, beside where it
binds: what `starmesh up` runs (cluster/launcher.py) and what the Kubernetes manifests
run (cluster/kubernetes/), from the one deployment file.

    serve_args(spec, deployment, checkpoint="/cache/tiny/qwen3-omni")
    -> ["--checkpoint", "/cache/tiny/qwen3-omni", "--option", "max_batch=8", ...]
"""
from __future__ import annotations

import json

from cluster.dlo_groups import member_args
from conductor.deployment import Deployment
from conductor.service_spec import ServiceSpec


def serve_args(s: ServiceSpec, deployment: Deployment, checkpoint: str = "", device: str | None = None,
               host_id: bool = True) -> list[str]:
    """checkpoint: the resolved checkpoint directory ("" for none); device: overrides the
    spec's (a pod sees its one GPU as cuda:0); host_id: pass the spec's host id (a pod
    is its own transport host, named by the environment instead)."""
    device = s.device if device is None else device
    args = []
    if device != "cpu":  # "cpu" is every factory's default: left out, as compose/ writes the commands
        args += ["--device", device]
    if checkpoint:
        args += ["--checkpoint", checkpoint]
    if s.host_id and host_id:
        args += ["--host-id", s.host_id]
    if s.mooncake:
        args += ["--mooncake"]
    if s.transport_mode != "auto":
        args += ["--transport-mode", s.transport_mode]
    if s.nice:
        args += ["--nice", str(s.nice)]
    for key, value in s.options.items():  # `serve` parses each value as JSON when it can
        args += ["--option", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return args + member_args(deployment.dlo_groups, s.name)  # rank, world and rendezvous of a dlo_group member
