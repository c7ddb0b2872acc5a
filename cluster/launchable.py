"""Deployments `starmesh up` can launch: a deployment file (schema: conductor/deployment.py)
plus what starting its processes needs, checked at load so that nothing starts for a
file that cannot run: the served-models shape (each model names its pipeline), a
`component` for every service, the dlo_group checks of cluster/dlo_groups.py, and no two
addresses it binds on one port (gRPC, /metrics, rendezvous: cluster/ports.check_distinct).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster.dlo_groups import check_dlo_groups
from cluster.ports import check_distinct
from conductor.deployment import Deployment
from conductor.deployment_file import deployment_from_dict, read_deployment
from core.errors import GraphError


def read_launchable(text_or_path: "str | Path") -> Deployment:
    """A deployment file (Path, "*.yaml" path string or YAML text), checked for launching."""
    return check_launchable(read_deployment(text_or_path))


def launchable_from_dict(data: Any) -> Deployment:
    return check_launchable(deployment_from_dict(data))


def check_launchable(deployment: Deployment) -> Deployment:
    """`deployment` itself once the checks of the module docstring pass."""
    for model in deployment.models.values():
        if not model.pipeline:  # only a top-level placement has no pipeline
            raise GraphError("deployment: a top-level placement places one model on running services; "
                             "`starmesh up` needs `models:`, each with its pipeline")
    for name, service in deployment.services.items():
        if service.dns is not None:
            raise GraphError(f"services.{name}.replicas: replicas from dns ({service.dns.dns}) are started by "
                             "their cluster; `starmesh up` needs a list of endpoints")
        if not service.component:
            raise GraphError(f"services.{name}: missing key 'component' (the registered component "
                             "`starmesh serve` runs)")
    check_dlo_groups(deployment)
    check_distinct(deployment.bound_addresses())
    return deployment
