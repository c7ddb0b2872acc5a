"""A deployment's `dlo_groups`: dit replicas that AllGather their offloaded blocks and
step in lockstep (docs/offload.md, "dlo_group").

    dlo_groups:
      cfg:
        address: "127.0.0.1:29500"     # rendezvous host:port (rank 0 binds it)
        world_size: 2                  # = len(members)
        members: [dit, dit_uncond]     # services in rank order, one replica each
        timeout_s: 60                  # optional: every collective gives up after this

Checked at load, naming the key: members exist, are `dit` components of one replica, in
one group only; world_size equals the number of members; every member's
`options.offload` has `use_allgather: true` (the group exists for it) and a service
outside every group may not set it (it would have no group to gather over). The
launcher passes each member `--dlo-group ADDR --dlo-rank R --dlo-world W` (member_args);
the conductor pads lockstep runs across the members (Placement.lockstep_groups).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from conductor.placement import check_endpoint
from core.errors import GraphError
from graph.node import check_name
from core.errors import InvalidArgument

GROUP = {"address", "world_size", "members", "timeout_s"}
MEMBER_COMPONENT = "dit"


@dataclass(frozen=True)
class DloGroupSpec:
    name: str
    address: str
    world_size: int
    members: tuple[str, ...]
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        where = f"dlo_groups.{self.name}"
        check_name("dlo group", self.name)
        check_endpoint(where, self.address)
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            raise GraphError(f"{where}.world_size must be an int >= 1, got {self.world_size!r}")
        if self.world_size != len(self.members):
            raise GraphError(f"{where}.world_size ({self.world_size}) must equal the number of members "
                             f"({len(self.members)}: {list(self.members)})")
        if len(set(self.members)) != len(self.members):
            raise GraphError(f"{where}.members lists a service twice: {list(self.members)}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise GraphError(f"{where}.timeout_s must be a number > 0, got {self.timeout_s!r}")


def parse_dlo_groups(data: Any) -> dict[str, DloGroupSpec]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise GraphError(f"dlo_groups must be a mapping, got {type(data).__name__}")
    groups = {}
    for name, spec in data.items():
        where = f"dlo_groups.{name}"
        if not isinstance(spec, Mapping):
            raise GraphError(f"{where} must be a mapping, got {type(spec).__name__}")
        unknown = sorted(set(spec) - GROUP)
        missing = sorted({"address", "world_size", "members"} - set(spec))
        if unknown or missing:
            raise GraphError(f"{where}: unknown key(s) {unknown}, missing {missing} (allowed: {sorted(GROUP)})")
        members = spec["members"]
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members) or not members:
            raise GraphError(f"{where}.members must be a non-empty list of service names")
        groups[str(name)] = DloGroupSpec(str(name), str(spec["address"]), spec["world_size"], tuple(members),
                                         spec.get("timeout_s", 60.0))
    return groups


def _uses_allgather(service, where: str) -> bool:
    """The service's offload option parsed as `serve` will parse it (errors name it here)."""
    from engine.offload.config import OffloadConfig

    section = service.options.get("offload")
    if section is None:
        return False
    if not isinstance(section, Mapping):
        raise GraphError(f"{where}.options.offload must be a mapping, got {section!r}")
    try:
        config = OffloadConfig.from_dict({"enabled": True, **section})
    except InvalidArgument as e:
        raise GraphError(f"{where}.options.{e}") from None
    return config.enabled and config.use_allgather


def check_dlo_groups(groups: Mapping[str, DloGroupSpec], services: Mapping[str, Any]) -> None:
    """The cross-checks against the services (module docstring)."""
    owner: dict[str, str] = {}
    for group in groups.values():
        where = f"dlo_groups.{group.name}"
        for member in group.members:
            service = services.get(member)
            if service is None:
                raise GraphError(f"{where}.members: unknown service {member!r}")
            if service.component != MEMBER_COMPONENT:
                raise GraphError(f"{where}.members: service {member} is a {service.component!r} component; only "
                                 f"{MEMBER_COMPONENT!r} replicas step in lockstep (a KV-cache engine's never do)")
            if len(service.replicas) != 1:
                raise GraphError(f"{where}.members: service {member} has {len(service.replicas)} replicas; a rank "
                                 "is one replica (declare one service per rank)")
            if member in owner:
                raise GraphError(f"service {member} is a member of dlo_groups {owner[member]} and {group.name}")
            owner[member] = group.name
    for name, service in services.items():
        gathers = _uses_allgather(service, f"services.{name}")
        if name in owner and not gathers:
            raise GraphError(f"services.{name} is a member of dlo_groups.{owner[name]}: it needs "
                             "options.offload.use_allgather: true (the group AllGathers its offloaded blocks)")
        if gathers and name not in owner:
            raise GraphError(f"services.{name}.options.offload.use_allgather needs a dlo_groups entry listing "
                             f"{name} (the lockstep group to AllGather over)")


def member_args(groups: Mapping[str, DloGroupSpec], service: str) -> list[str]:
    """`starmesh serve` flags of a member service (none for other services)."""
    for group in groups.values():
        if service in group.members:
            return ["--dlo-group", group.address, "--dlo-rank", str(group.members.index(service)),
                    "--dlo-world", str(group.world_size), "--dlo-name", group.name,
                    "--dlo-timeout-s", f"{float(group.timeout_s):g}"]
    return []
