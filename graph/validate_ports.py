"""Port checks of one walk: edge endpoints, one producer per port, at most one
streaming input per node, every input fed."""
from __future__ import annotations

from graph.composites import node_names
from graph.edge import GraphEdge
from core.errors import GraphError
from graph.node import WALK_INPUT, WALK_OUTPUT


def check_port(graph, walk, where: str, node: str, port: str, direction: str) -> None:
    """`node.port` is a port of `direction` ("output"/"input") of a node in `walk`."""
    if node not in graph.node_by_name:
        raise GraphError(f"walk {walk.name}: {where}: unknown node {node!r}")
    if node not in walk.node_names:
        raise GraphError(f"walk {walk.name}: {where}: node {node!r} is not in the walk's body")
    node_def = graph.node_by_name[node]
    ports = node_def.outputs if direction == "output" else node_def.inputs
    if port not in ports:
        raise GraphError(f"walk {walk.name}: {where}: {node} has no {direction} {port!r} (has {list(ports)})")


def check_edges(graph, walk) -> None:
    """src is `input.<name>` or a node's output port; dst `output.<name>` or an input port."""
    for edge in walk.edges:
        if not isinstance(edge, GraphEdge):
            raise GraphError(f"walk {walk.name}: {edge!r} is not a GraphEdge")
        where = f"edge {edge}"
        if edge.src_node == WALK_OUTPUT:
            raise GraphError(f"walk {walk.name}: {where}: a walk output cannot be a source")
        if edge.dst_node == WALK_INPUT:
            raise GraphError(f"walk {walk.name}: {where}: a walk input cannot be a destination")
        if edge.src_node != WALK_INPUT:
            check_port(graph, walk, where, edge.src_node, edge.src_port, "output")
        if edge.dst_node != WALK_OUTPUT:
            check_port(graph, walk, where, edge.dst_node, edge.dst_port, "input")


def check_single_producer(walk) -> None:
    """One edge per destination port (walk outputs included); a loop's carry may
    add a second producer only for an input whose other edge enters the loop (that
    edge feeds iteration 0, the carry the later ones)."""
    fed: dict[str, GraphEdge] = {}
    for edge in walk.edges:
        if edge.dst in fed:
            raise GraphError(f"walk {walk.name}: duplicate port {edge.dst}: fed by {fed[edge.dst]} and {edge}")
        fed[edge.dst] = edge
    carried: dict[str, GraphEdge] = {}
    for loop, _ in walk.loops:
        inside = set(node_names(loop))
        for carry in loop.carry:
            if carry.dst in carried:
                raise GraphError(
                    f"walk {walk.name}: duplicate port {carry.dst}: fed by carries {carried[carry.dst]} and {carry}"
                )
            carried[carry.dst] = carry
            edge = fed.get(carry.dst)
            if edge is not None and edge.src_node in inside:
                raise GraphError(
                    f"walk {walk.name}: duplicate port {carry.dst}: fed by carry {carry} of loop {loop.name} "
                    f"and by edge {edge} from inside the loop (the edge must enter the loop)"
                )


def check_single_stream_input(walk) -> None:
    """A node takes at most one streaming input: its runs are cut from that one stream
    (one run per chunk, or chunks pushed into one open run)."""
    streamed: set[str] = set()
    for edge in walk.edges:
        if edge.is_streaming and edge.dst_node != WALK_OUTPUT:
            if edge.dst_node in streamed:
                raise GraphError(f"walk {walk.name}: node {edge.dst_node} has several streaming inputs")
            streamed.add(edge.dst_node)


def check_inputs_fed(graph, walk) -> None:
    fed = {edge.dst for edge in walk.edges}
    fed |= {carry.dst for loop, _ in walk.loops for carry in loop.carry}
    for name in walk.node_names:
        for port in graph.node_by_name[name].inputs:
            if f"{name}.{port}" not in fed:
                raise GraphError(f"input {name}.{port} is produced by no edge in walk {walk.name}")
