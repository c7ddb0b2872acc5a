"""Static facts of one walk the executor needs: loop paths, edges by node, which
loops run inside a component and which nodes are fed chunk by chunk."""
from __future__ import annotations

from graph.composites import Loop, node_names
from graph.edge import GraphEdge
from core.errors import GraphError
from graph.node import WALK_INPUT, WALK_OUTPUT
from graph.walk import Walk

Tag = tuple[int, ...]


class WalkScope:
    def __init__(self, walk: Walk, inner_loops: frozenset[str] = frozenset(),
                 speculative: frozenset[str] = frozenset(), colocated=lambda src, dst, walk: False) -> None:
        self.walk = walk
        self.speculative = speculative  # nodes that may run one DynamicLoop iteration ahead
        self.nodes = walk.node_names
        self.path: dict[str, tuple[Loop, ...]] = {n: walk.loop_path(n) for n in self.nodes}
        self.loops = [loop for loop, _ in walk.loops]
        self.members = {loop.name: set(node_names(loop)) for loop in self.loops}
        self._depth = {loop.name: len(outer) for loop, outer in walk.loops}
        self._children: dict[str | None, list[Loop]] = {}
        for loop, outer in walk.loops:
            self._children.setdefault(outer[-1].name if outer else None, []).append(loop)
        self._direct = {loop.name: [n for n in self.nodes if self.path[n] and self.path[n][-1] is loop]
                        for loop in self.loops}
        self.in_edges: dict[str, dict[str, GraphEdge]] = {n: {} for n in self.nodes}
        self.out_edges: dict[str, list[GraphEdge]] = {n: [] for n in self.nodes}
        self.carry_in: dict[str, dict[str, GraphEdge]] = {n: {} for n in self.nodes}
        for edge in walk.edges:
            if edge.dst_node != WALK_OUTPUT:
                self.in_edges[edge.dst_node][edge.dst_port] = edge
            if edge.src_node != WALK_INPUT:
                self.out_edges[edge.src_node].append(edge)
        for loop in self.loops:
            for edge in loop.carry:
                self.carry_in[edge.dst_node][edge.dst_port] = edge
        for loop in self.loops:
            if loop.stop is not None and loop.stop.component_predicate and loop.name not in inner_loops:
                raise GraphError(f"walk {walk.name}: loop {loop.name}: a component stop predicate needs the "
                                 "loop to run inside its component (inner_loops)")
        # A single-node loop whose component can run it runs inside that component
        # (DESIGN 5): one dispatch per entry, outputs tagged per iteration.
        self.inner: dict[str, Loop] = {}
        for loop in self.loops:
            body = node_names(loop)
            if loop.name in inner_loops and len(body) == 1 and (loop.stop is None or loop.stop.predicate is None):
                self.inner[body[0]] = loop
        for loop in self.loops:
            for edge in loop.carry:
                if edge.dst_node not in self.inner and edge.dst_port not in self.in_edges[edge.dst_node]:
                    raise GraphError(f"walk {walk.name}: loop {loop.name}: carried port {edge.dst} has no edge "
                                     "for iteration 0 (only a loop run inside its component may start without one)")
        # A streaming input feeds either one run per chunk (stream_in) or, for a loop
        # inside a component, PushChunk items into its one open run (pushed).
        self.stream_in: dict[str, GraphEdge] = {}
        self.pushed: dict[str, GraphEdge] = {}
        for node, edges in self.in_edges.items():
            streaming = [e for e in edges.values() if e.is_streaming]
            if len(streaming) > 1:
                raise GraphError(f"walk {walk.name}: node {node} has several streaming inputs")
            if streaming:
                (self.pushed if node in self.inner else self.stream_in)[node] = streaming[0]
        self._find_local_edges(colocated)

    def _find_local_edges(self, colocated) -> None:
        """Streaming edges the producer's service hands over in-process (co-location): from
        a loop run inside a component to a chunk-fed node of the same process, outside that
        loop. The conductor sends nothing on them; the service opens the chunk runs."""
        self.local_in: dict[str, GraphEdge] = {}
        self.local_out: dict[str, list[GraphEdge]] = {n: [] for n in self.nodes}
        for node, edge in self.stream_in.items():
            src = edge.src_node
            if (src in self.inner and self.depth(node) == self.common(src, node)
                    and colocated(src, node, self.walk.name)):
                self.local_in[node] = edge
                self.local_out[src].append(edge)

    def depth(self, node: str) -> int:
        """Tag length of the node's dispatches (an inner loop is dispatched once per entry)."""
        return len(self.path[node]) - (1 if node in self.inner else 0)

    def common(self, src: str, dst: str) -> int:
        """Number of loops enclosing both nodes (their shared tag prefix)."""
        n = 0
        for a, b in zip(self.path[src], self.path[dst]):
            if a is not b:
                break
            n += 1
        return n

    def loop_depth(self, loop: Loop) -> int:
        """Tag length of the scope that contains `loop` (its parent's iterations)."""
        return self._depth[loop.name]

    def direct_members(self, loop: Loop) -> list[str]:
        """Nodes whose innermost enclosing loop is `loop`."""
        return self._direct[loop.name]

    def child_loops(self, loop: Loop | None) -> list[Loop]:
        """Loops directly inside `loop` (top-level loops for None)."""
        return self._children.get(None if loop is None else loop.name, [])

    def top_nodes(self) -> list[str]:
        return [n for n in self.nodes if not self.path[n]]
