"""What a conductor serves: a model = a walk graph + where its nodes run."""
from __future__ import annotations

from dataclasses import dataclass, field

from conductor.placement import Placement
from graph.walk import WalkGraph


@dataclass(frozen=True)
class ServedModel:
    """name: what clients ask for; inner_loops: loops whose single node runs its loop
    inside its component (DESIGN 5); the conductor drives every other loop."""

    name: str
    graph: WalkGraph
    placement: Placement
    inner_loops: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("model.name is empty")
        object.__setattr__(self, "inner_loops", frozenset(self.inner_loops))
        self.placement.validate(self.graph)
