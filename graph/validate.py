"""Validation of a WalkGraph when it is built (minimal; extended by the graph tests)."""
from __future__ import annotations

from graph.errors import GraphError
from graph.node import WALK_INPUT, WALK_OUTPUT


def validate_graph(graph) -> None:
    for walk in graph.walks:
        for name in walk.node_names:
            if name not in graph.node_by_name:
                raise GraphError(f"walk {walk.name}: unknown node {name!r}")
        for edge in walk.edges:
            if edge.src_node != WALK_INPUT and edge.src_port not in graph.node_by_name[edge.src_node].outputs:
                raise GraphError(f"walk {walk.name}: edge {edge}: {edge.src_node} has no output {edge.src_port!r}")
            if edge.dst_node != WALK_OUTPUT and edge.dst_port not in graph.node_by_name[edge.dst_node].inputs:
                raise GraphError(f"walk {walk.name}: edge {edge}: {edge.dst_node} has no input {edge.dst_port!r}")
