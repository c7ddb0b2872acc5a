"""Every shipped deployment file (compose/deployments/*.yaml) places every node of every
walk of each of its models on a service it names, whose component is registered, and
starts no service that no model places; nothing is started or loaded.

Each model is built as the conductor builds it (cluster.conductor_process.built_models):
its pipeline's placement, not the file's, is the one that must cover the graph, since a
pipeline may place nodes the file does not name (qwen3-omni's media walks run
prefill_media where prefill runs). The graphs are read from the models, so a node a
pipeline adds must be placed by the files that serve it. The top-level placements (one
model on running services: the toy graph) are checked against that graph."""
from __future__ import annotations

import copy

import pytest
import yaml

from cluster import registry
from cluster.conductor_process import built_models
from cluster.deployment_dir import SHIPPED_DIR
from cluster.launchable import launchable_from_dict, read_launchable
from conductor.placement import Placement
from core.errors import GraphError
from tests.conductor.test_placement import toy_graph

FILES = sorted(SHIPPED_DIR.glob("*.yaml"))
PLACEMENT_ONLY = ("toy-colocated.yaml", "toy-local.yaml")  # a top-level placement of the toy graph


def placed_services(spec) -> dict[str, set[str]]:
    """service -> the "model/walk/node"s it runs, over every model the conductor would
    build from `spec` (GraphError naming an unplaced node and its walk)."""
    out: dict[str, set[str]] = {}
    for model in built_models(spec):
        for walk in model.graph.walks:
            for node in walk.node_names:
                service = model.placement.service_name_for(node, walk.name)
                out.setdefault(service, set()).add(f"{model.name}/{walk.name}/{node}")
    return out


def test_the_shipped_files_are_all_here():
    assert len(FILES) >= 9 and {p.name for p in FILES} >= {"local.yaml", "compose.yaml", *PLACEMENT_ONLY}


@pytest.mark.parametrize("path", [p for p in FILES if p.name not in PLACEMENT_ONLY], ids=lambda p: p.name)
def test_every_node_of_every_walk_runs_on_a_named_service(path):
    spec = read_launchable(path)
    placed = placed_services(spec)
    unknown = {s: sorted(runs)[:3] for s, runs in placed.items() if s not in spec.services}
    assert not unknown, f"{path.name}: nodes placed on services the file does not name: {unknown}"
    for name in placed:
        assert spec.services[name].component in registry.component_names(), (path.name, name)
    idle = sorted(set(spec.services) - set(placed))
    assert not idle, f"{path.name}: services no model places a node on: {idle}"


@pytest.mark.parametrize("name", PLACEMENT_ONLY)
def test_the_top_level_placements_cover_the_toy_graph(name):
    placement, graph = Placement.from_yaml(SHIPPED_DIR / name), toy_graph()
    placement.validate(graph)
    assert {placement.service_name_for(n, w.name) for w in graph.walks for n in w.node_names} <= set(placement.services)


@pytest.mark.parametrize("node", ["talker", "code2wav"])
def test_a_node_the_file_leaves_unplaced_is_named_with_its_walk(node):
    data = copy.deepcopy(yaml.safe_load((SHIPPED_DIR / "local.yaml").read_text()))
    del data["models"]["qwen3-omni"]["placement"][node]
    with pytest.raises(GraphError, match=rf"unplaced node {node} in walk \w+"):
        placed_services(launchable_from_dict(data))
