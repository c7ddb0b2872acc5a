"""DloGroupSpec: one entry of a deployment's `dlo_groups`, dit replicas that AllGather
their offloaded blocks and step in lockstep (docs/offload.md, "dlo_group").

    dlo_groups:
      cfg:
        address: "127.0.0.1:29500"     # rendezvous host:port (rank 0 binds it)
        world_size: 2                  # = len(members)
        members: [dit, dit_uncond]     # services in rank order, one replica each
        timeout_s: 60                  # optional: every collective gives up after this

The conductor pads lockstep runs across the members (Placement.lockstep_groups); the
launcher gives each member its rank flags (cluster/dlo_groups.py). Checks against the
services: Deployment (members exist, one replica each, one group each) and
cluster/dlo_groups.py (members are components that can step in lockstep, with
AllGather offload).
"""
from __future__ import annotations

from dataclasses import dataclass

from conductor.service_spec import check_endpoint
from core.errors import GraphError
from graph.node import check_name


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
        if isinstance(self.members, str):  # a bare string would iterate per character
            raise GraphError(f"{where}.members must be a non-empty list of service names")
        object.__setattr__(self, "members", tuple(self.members))
        if not self.members or not all(isinstance(m, str) for m in self.members):
            raise GraphError(f"{where}.members must be a non-empty list of service names")
        if self.world_size != len(self.members):
            raise GraphError(f"{where}.world_size ({self.world_size}) must equal the number of members "
                             f"({len(self.members)}: {list(self.members)})")
        if len(set(self.members)) != len(self.members):
            raise GraphError(f"{where}.members lists a service twice: {list(self.members)}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise GraphError(f"{where}.timeout_s must be a number > 0, got {self.timeout_s!r}")
