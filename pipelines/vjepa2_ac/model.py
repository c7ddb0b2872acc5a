"""The world model as the conductor serves it: the graph, the rollout loop inside the
world service, WorldParams."""
from __future__ import annotations

from pipelines.vjepa2_ac.graph import ROLLOUT_LOOP, world_graph


def placement_dict(name: str, world: str) -> dict:
    """Every node on one world service at endpoint `world`."""
    graph = world_graph(name)
    return {"model": name, "services": {"world": {"replicas": [world]}},
            "placement": {n.name: "world" for n in graph.nodes}}


def world_model(name: str, placement):
    from conductor.model import ServedModel
    from engine.models.vjepa2_ac.params import WorldParams

    return ServedModel(name, world_graph(name), placement, {ROLLOUT_LOOP}, params=WorldParams)


def served_model(name: str, world: str):
    """The ServedModel with every node on the world service at `world`."""
    from conductor.placement import Placement

    return world_model(name, Placement.from_dict(placement_dict(name, world)))
