"""What launching a deployment's `dlo_groups` needs beyond the schema
(conductor/dlo_group_spec.py): checks that need the components, and each member's flags.

Checked at load, naming the key: members are components that can step in lockstep
(services/options.py), every member's `options.offload` has `use_allgather: true` (the
group exists for it), and a service outside every group may not set it (it would have
no group to gather over). The launcher passes each member `--dlo-group ADDR --dlo-rank R
--dlo-world W` (member_args).
"""
from __future__ import annotations

from typing import Mapping

from conductor.deployment import Deployment
from conductor.dlo_group_spec import DloGroupSpec
from conductor.service_spec import ServiceSpec
from core.errors import GraphError, InvalidArgument


def check_dlo_groups(deployment: Deployment) -> None:
    """The checks of the module docstring (Deployment has checked that members exist,
    have one replica each and belong to one group)."""
    # services.options reads offload configs through engine.offload, whose package imports
    # torch: only a file with groups or offload options pays for it (`up` and the conductor
    # load every deployment, and need no torch of their own).
    owner: dict[str, str] = {}
    if deployment.dlo_groups:
        from services.options import LOCKSTEP_COMPONENTS, can_step_in_lockstep
    for group in deployment.dlo_groups.values():
        for member in group.members:
            service = deployment.services[member]
            if not can_step_in_lockstep(service.component):
                raise GraphError(f"dlo_groups.{group.name}.members: service {member} is a {service.component!r} "
                                 f"component; only {sorted(LOCKSTEP_COMPONENTS)} replicas step in lockstep "
                                 "(a KV-cache engine's never do)")
            owner[member] = group.name
    for name, service in deployment.services.items():
        gathers = _uses_allgather(service)
        if name in owner and not gathers:
            raise GraphError(f"services.{name} is a member of dlo_groups.{owner[name]}: it needs "
                             "options.offload.use_allgather: true (the group AllGathers its offloaded blocks)")
        if gathers and name not in owner:
            raise GraphError(f"services.{name}.options.offload.use_allgather needs a dlo_groups entry listing "
                             f"{name} (the lockstep group to AllGather over)")


def _uses_allgather(service: ServiceSpec) -> bool:
    """The service's offload option parsed as `serve` will parse it (errors name it here)."""
    if "offload" not in service.options:
        return False
    from services.options import check_options

    try:
        config = check_options(service.options)
    except InvalidArgument as e:
        raise GraphError(f"services.{service.name}.{e}") from None
    return config is not None and config.enabled and config.use_allgather


def member_args(groups: Mapping[str, DloGroupSpec], service: str) -> list[str]:
    """`starmesh serve` flags of a member service (none for other services)."""
    for group in groups.values():
        if service in group.members:
            return ["--dlo-group", group.address, "--dlo-rank", str(group.members.index(service)),
                    "--dlo-world", str(group.world_size), "--dlo-name", group.name,
                    "--dlo-timeout-s", f"{float(group.timeout_s):g}"]
    return []
