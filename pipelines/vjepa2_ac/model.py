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
    from core.input_spec import InputSpec
    from conductor.model import ServedModel
    from engine.models.vjepa2_ac.params import WorldParams

    frames = InputSpec("float", 4, what="video frames [F, C, H, W]")
    steps = InputSpec("float", 2, what="one row per timestep [N, A]")
    specs = {"frames": frames, "goal": frames, "actions": steps, "states": steps}
    return ServedModel(name, world_graph(name), placement, {ROLLOUT_LOOP}, params=WorldParams, input_specs=specs)


def served_model(name: str, world: str):
    """The ServedModel with every node on the world service at `world`."""
    from conductor.placement import Placement

    return world_model(name, Placement.from_dict(placement_dict(name, world)))
