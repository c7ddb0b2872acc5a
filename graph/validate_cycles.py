"""No cycle among a walk's nodes through its (non-carry) edges: iteration is only
expressed by a Loop, whose carry edges are the one allowed kind of back edge (they
live on the Loop, not in `walk.edges`, so they never appear here)."""
from __future__ import annotations

from graph.edge import GraphEdge
from core.errors import GraphError
from graph.node import WALK_INPUT, WALK_OUTPUT


def check_acyclic(walk) -> None:
    out: dict[str, list[GraphEdge]] = {name: [] for name in walk.node_names}
    for edge in walk.edges:
        if edge.src_node != WALK_INPUT and edge.dst_node != WALK_OUTPUT:
            out[edge.src_node].append(edge)
    done: set[str] = set()
    for root in walk.node_names:
        if root not in done:
            _visit(walk, out, root, done)


def _visit(walk, out: dict[str, list[GraphEdge]], root: str, done: set[str]) -> None:
    """Iterative DFS from `root`; an edge back onto the current path closes a cycle."""
    path = [root]
    on_path = {root}
    todo = [iter(out[root])]
    while todo:
        edge = next(todo[-1], None)
        if edge is None:
            node = path.pop()
            on_path.discard(node)
            done.add(node)
            todo.pop()
            continue
        nxt = edge.dst_node
        if nxt in on_path:
            cycle = path[path.index(nxt):] + [nxt]
            raise GraphError(
                f"walk {walk.name}: edge {edge} closes a cycle {' -> '.join(cycle)} outside any loop "
                f"(only a Loop's carry edges may go back)"
            )
        if nxt not in done:
            path.append(nxt)
            on_path.add(nxt)
            todo.append(iter(out[nxt]))
