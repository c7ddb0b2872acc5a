"""Validation of a WalkGraph when it is built (called by `WalkGraph.__post_init__`).

Graph level: unique node and walk names, `first_walk` names a walk. Per walk, in
this order so the first error names the real culprit:
1. body: only known nodes, each once; loop names unique; Parallel `required`
   names something inside it;
2. endpoints (graph.validate_ports): every edge, carry, accumulate port and stop
   watch names an existing node of the walk and a port of the right direction;
3. loops (graph.validate_loops): carry, accumulate and watch stay inside their
   loop; an edge from loop A into a loop B that does not enclose A delivers A's exit value
   (last or accumulated) to every iteration of B, or streams A's iterations into B;
4. one producer per port (duplicate port), one streaming input per node;
5. no cycle outside loop carries (graph.validate_cycles);
6. every input port of every node is fed by an edge or a carry.
A walk without outputs is allowed (its outputs are empty).

`validate_inner_loops` adds the checks that depend on which loops a deployment runs
inside their component; an executor runs it once when it is built for the graph.
"""
from __future__ import annotations

from graph.composites import Loop, Parallel, Sequential, loops_in, node_names
from core.errors import GraphError
from graph.node import GraphNode
from graph.validate_cycles import check_acyclic
from graph.validate_loops import check_inner_loops, check_loop_ports
from graph.validate_ports import check_edges, check_inputs_fed, check_single_producer, check_single_stream_input


def validate_graph(graph) -> None:
    _check_names(graph)
    for walk in graph.walks:
        validate_walk(graph, walk)


def validate_walk(graph, walk) -> None:
    _check_body(graph, walk)
    check_edges(graph, walk)
    check_loop_ports(graph, walk)
    check_single_producer(walk)
    check_single_stream_input(walk)
    check_acyclic(walk)
    check_inputs_fed(graph, walk)


def validate_inner_loops(graph, inner_loops) -> None:
    """The graph run with `inner_loops` (loop names) inside their components."""
    for walk in graph.walks:
        check_inner_loops(walk, frozenset(inner_loops))


def _check_names(graph) -> None:
    seen: set[str] = set()
    for node in graph.nodes:
        if not isinstance(node, GraphNode):
            raise GraphError(f"graph {graph.name}: {node!r} is not a GraphNode")
        if node.name in seen:
            raise GraphError(f"graph {graph.name}: duplicate node name {node.name!r}")
        seen.add(node.name)
    walks: set[str] = set()
    for walk in graph.walks:
        if walk.name in walks:
            raise GraphError(f"graph {graph.name}: duplicate walk name {walk.name!r}")
        walks.add(walk.name)
    if isinstance(graph.first_walk, str) and graph.first_walk not in walks:
        raise GraphError(
            f"graph {graph.name}: first_walk {graph.first_walk!r} is not a walk (walks: {sorted(walks)})"
        )


def _check_body(graph, walk) -> None:
    if not isinstance(walk.body, (str, Sequential, Parallel, Loop)):
        raise GraphError(f"walk {walk.name}: body {walk.body!r} is not a node name or a composite")
    seen: set[str] = set()
    for name in walk.node_names:
        if name not in graph.node_by_name:
            raise GraphError(f"walk {walk.name}: unknown node {name!r}")
        if name in seen:
            raise GraphError(f"walk {walk.name}: node {name!r} appears twice in the body")
        seen.add(name)
    loops: set[str] = set()
    for loop, _ in walk.loops:
        # The executor keys iteration state by loop name.
        if loop.name in loops:
            raise GraphError(f"walk {walk.name}: two loops named {loop.name!r}")
        loops.add(loop.name)
    _check_required(walk, walk.body)


def _check_required(walk, part) -> None:
    """A Parallel's `required` names nodes or loops among its branches."""
    if isinstance(part, str):
        return
    if isinstance(part, Parallel) and part.required is not None:
        inside = set(node_names(part)) | {lp.name for lp, _ in loops_in(part)}
        for name in part.required:
            if name not in inside:
                raise GraphError(
                    f"walk {walk.name}: Parallel required branch {name!r} is not a node or loop inside it"
                )
    for child in part.parts:
        _check_required(walk, child)

