"""What a conductor serves: a model = a walk graph + where its nodes run."""
from __future__ import annotations

from dataclasses import dataclass, field

from conductor.placement import Placement
from graph.walk import WalkGraph


@dataclass(frozen=True)
class ServedModel:
    """name: what clients ask for; inner_loops: loops whose single node runs its loop
    inside its component (DESIGN 5); the conductor drives every other loop.
    lockstep_nodes: nodes whose runs are forwards of a block stack that a dlo_group's
    replicas gather in lockstep (the DiT's denoising branches): on the placement's
    lockstep groups every such run is padded to all ranks (conductor.lockstep)."""

    name: str
    graph: WalkGraph
    placement: Placement
    inner_loops: frozenset[str] = field(default_factory=frozenset)
    lockstep_nodes: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("model.name is empty")
        object.__setattr__(self, "inner_loops", frozenset(self.inner_loops))
        object.__setattr__(self, "lockstep_nodes", frozenset(self.lockstep_nodes))
        self.placement.validate(self.graph)
        unknown = sorted(self.lockstep_nodes - set(self.graph.node_by_name))
        if unknown:
            raise ValueError(f"model {self.name}: lockstep_nodes {unknown} are not nodes of its graph")
        if self.placement.lockstep_groups and not self.lockstep_nodes:
            raise ValueError(f"model {self.name}: the placement has lockstep groups "
                             f"{sorted(self.placement.lockstep_groups)} but the model names no lockstep nodes "
                             "(the runs to pad across their ranks)")
