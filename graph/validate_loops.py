"""Loop checks of one walk: carry edges, accumulate ports and stop watches stay
inside their loop, and edges only cross loop boundaries where iteration tags line
up (into enclosed loops, or out of loops toward an enclosing scope). Checks that
depend on which loops run inside their component take those loops' names."""
from __future__ import annotations

from graph.composites import node_names
from graph.edge import split_endpoint
from core.errors import GraphError
from graph.validate_ports import check_port


def check_loop_ports(graph, walk) -> None:
    for loop, _ in walk.loops:
        inside = set(node_names(loop))
        label = f"loop {loop.name}"
        for carry in loop.carry:
            where = f"{label}: carry {carry}"
            check_port(graph, walk, where, carry.src_node, carry.src_port, "output")
            check_port(graph, walk, where, carry.dst_node, carry.dst_port, "input")
            # A carry is the loop's only back edge: both ends iterate with the loop.
            for end in (carry.src_node, carry.dst_node):
                if end not in inside:
                    raise GraphError(f"walk {walk.name}: {where}: node {end!r} is not inside the loop")
        endpoints = [("accumulate", e) for e in loop.accumulate]
        if loop.stop is not None:
            endpoints.append(("stop watch", loop.stop.watch))
        for kind, endpoint in endpoints:
            node, port = split_endpoint(endpoint)
            where = f"{label}: {kind} {endpoint}"
            check_port(graph, walk, where, node, port, "output")
            if node not in inside:
                raise GraphError(f"walk {walk.name}: {where}: node {node!r} is not inside the loop")


def check_inner_loops(walk, inner_loops: frozenset[str]) -> None:
    """`inner_loops`: the loops a deployment runs inside their component. Only such a
    loop may stop on a component predicate, or start without an edge feeding a carried
    port at iteration 0 (its component holds the state)."""
    for loop, _ in walk.loops:
        if loop.stop is not None and loop.stop.component_predicate and loop.name not in inner_loops:
            raise GraphError(f"walk {walk.name}: loop {loop.name}: a component stop predicate needs the "
                             "loop to run inside its component (inner_loops)")
    inner = walk.component_loops(inner_loops)
    fed = {edge.dst for edge in walk.edges}
    for loop, _ in walk.loops:
        for edge in loop.carry:
            if edge.dst_node not in inner and edge.dst not in fed:
                raise GraphError(f"walk {walk.name}: loop {loop.name}: carried port {edge.dst} has no edge "
                                 "for iteration 0 (only a loop run inside its component may start without one)")
