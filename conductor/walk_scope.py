"""Static facts of one walk the executor needs: loop paths, edges by node, which
loops run inside a component and which nodes are fed chunk by chunk. Built from a
walk validated for these inner loops (graph.validate.validate_inner_loops)."""
from __future__ import annotations

from graph.composites import Loop, node_names
from graph.edge import GraphEdge
from graph.node import WALK_INPUT, WALK_OUTPUT
from graph.walk import Walk

Tag = tuple[int, ...]


def never_colocated(src: str, dst: str, walk: str) -> bool:
    """The default: no two nodes share a process."""
    return False


class WalkScope:
    def __init__(self, walk: Walk, inner_loops: frozenset[str] = frozenset(),
                 speculative: frozenset[str] = frozenset(), can_route=never_colocated) -> None:
        """can_route(src, dst, walk): the producer's runtime can feed the consumer itself
        (a co-located consumer, or a replica it can reach; see routed_in)."""
        self.walk = walk
        self.speculative = speculative  # nodes that may run one DynamicLoop iteration ahead
        self.nodes = walk.node_names
        self.path: dict[str, tuple[Loop, ...]] = {n: walk.loop_path(n) for n in self.nodes}
        self._top_nodes = [n for n in self.nodes if not self.path[n]]  # read per pump (is_complete)
        self.loops = [loop for loop, _ in walk.loops]
        self.members = {loop.name: set(node_names(loop)) for loop in self.loops}
        self.inner: dict[str, Loop] = walk.component_loops(frozenset(inner_loops))  # node -> its loop
        self.in_edges, self.out_edges = _edges_by_node(walk)
        self.carry_in = _carries_by_node(walk)
        self.stream_in, self.pushed = _streaming_inputs(self.in_edges, self.inner)
        self.routed_in, self.routed_push, self.routed_out = self._routed_edges(can_route)
        self.routed = frozenset(e for edges in self.routed_out.values() for e in edges)
        self.quiet_ports = self._quiet_ports()
        # "node.port" values the loops the conductor drives read (inner loops stop in their service)
        self._driven_watches = self._stop_watches(loop for loop in self.loops if loop not in self.inner.values())
        self._quiet_silent: dict[tuple[str, frozenset[str]], tuple[str, ...]] = {}
        self.client_ports = self._client_ports()
        self.client_only = self._client_only()
        # client-only nodes in no loop: a batch of their outputs is forwarded as rows (WalkState.on_rows)
        self.forwarded = frozenset(n for n in self.client_only if not self.path[n] and n not in self.inner)
        # node -> its walk-output edges (a client-only node has no other edges the conductor carries)
        self.to_client = {n: tuple(e for e in self.out_edges[n] if e.dst_node == WALK_OUTPUT) for n in self.forwarded}
        self._depth = {loop.name: len(outer) for loop, outer in walk.loops}
        self._children = _child_loops(walk)
        self._direct = {loop.name: [n for n in self.nodes if self.path[n] and self.path[n][-1] is loop]
                        for loop in self.loops}

    def _routed_edges(self, can_route):
        """Streaming edges the producer's runtime feeds directly (the conductor sends
        nothing per item on them): out of a loop run inside a component, or out of a
        node that is itself fed by a routed edge (one run per chunk), into a chunk-fed
        node whose only input is that stream (routed_in: its chunk runs are opened by
        its replica) or into a loop run inside a component fed by pushes (routed_push:
        the conductor opens the run, the producer pushes). The consumer is not inside a
        loop the producer is not in. Returns (routed_in, routed_push, routed_out)."""
        routed_in: dict[str, GraphEdge] = {}
        routed_push: dict[str, GraphEdge] = {}
        routed_out: dict[str, list[GraphEdge]] = {n: [] for n in self.nodes}
        candidates = [(n, e, False) for n, e in self.stream_in.items() if len(self.in_edges[n]) == 1]
        candidates += [(n, e, True) for n, e in self.pushed.items()]
        changed = True
        while changed:  # a chain routes once its head does
            changed = False
            for node, edge, is_push in candidates:
                src = edge.src_node
                if node in routed_in or node in routed_push or not (src in self.inner or src in routed_in):
                    continue
                if self.depth(node) != self.common(src, node) or not can_route(src, node, self.walk.name):
                    continue
                (routed_push if is_push else routed_in)[node] = edge
                routed_out[src].append(edge)
                changed = True
        return routed_in, routed_push, routed_out

    def _stop_watches(self, loops) -> set[str]:
        """The "node.port" values the stop rules of these loops read."""
        return {loop.stop.watch for loop in loops if getattr(loop, "stop", None) is not None}

    def _quiet_ports(self) -> dict[str, tuple[str, ...]]:
        """node -> output ports that only routed edges read: never sent to the conductor."""
        watched = self._stop_watches(self.loops)
        quiet = {}
        for node, edges in self.routed_out.items():
            ports = {e.src_port for e in edges}
            needed = {e.src_port for e in self.out_edges[node] if e not in edges}
            quiet[node] = tuple(sorted(p for p in ports - needed if f"{node}.{p}" not in watched))
        return quiet

    def _client_ports(self) -> dict[str, tuple[str, ...]]:
        """node -> output ports the conductor or its client reads by value: a walk
        output's (the client maps no arena), a stop rule's of a loop the conductor drives.
        Their values travel inline; the others go by reference to the services that read
        them (runtime.step_loop)."""
        ports: dict[str, set[str]] = {n: {e.src_port for e in self.out_edges[n] if e.dst_node == WALK_OUTPUT}
                                      for n in self.nodes}
        for watch in self._driven_watches:
            node, _, port = watch.partition(".")
            if node in ports:
                ports[node].add(port)
        return {n: tuple(sorted(p)) for n, p in ports.items() if p}

    def quiet_for(self, node: str, silent: frozenset[str] = frozenset()) -> tuple[str, ...]:
        """The node's output ports its service keeps to itself for a request whose client
        does not take the walk outputs `silent`: every reader of such a port is a routed
        edge or one of those outputs, and no loop the conductor drives watches it."""
        if not silent:
            return self.quiet_ports.get(node, ())
        key = (node, silent)
        if key not in self._quiet_silent:
            by_port: dict[str, list[GraphEdge]] = {}
            for e in self.out_edges[node]:
                by_port.setdefault(e.src_port, []).append(e)
            self._quiet_silent[key] = tuple(sorted(
                port for port, edges in by_port.items()
                if f"{node}.{port}" not in self._driven_watches
                and all(e in self.routed or (e.dst_node == WALK_OUTPUT and e.dst_port in silent) for e in edges)))
        return self._quiet_silent[key]

    def _client_only(self) -> frozenset[str]:
        """Nodes whose outputs the conductor only forwards to the client: no node it
        dispatches reads them, no loop it drives watches or encloses them (their outputs
        never make another run ready, so they need no readiness scan)."""
        inner = set(self.inner.values())
        watched = {w.split(".")[0] for w in self._driven_watches}
        return frozenset(
            n for n in self.nodes
            if n not in watched and all(loop in inner for loop in self.path[n])
            and all(e.dst_node == WALK_OUTPUT or e in self.routed for e in self.out_edges[n]))

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
        return self._top_nodes


def _edges_by_node(walk: Walk) -> tuple[dict[str, dict[str, GraphEdge]], dict[str, list[GraphEdge]]]:
    """(node -> {input port: the edge feeding it}, node -> edges out of it); walk
    inputs and outputs are not nodes."""
    in_edges: dict[str, dict[str, GraphEdge]] = {n: {} for n in walk.node_names}
    out_edges: dict[str, list[GraphEdge]] = {n: [] for n in walk.node_names}
    for edge in walk.edges:
        if edge.dst_node != WALK_OUTPUT:
            in_edges[edge.dst_node][edge.dst_port] = edge
        if edge.src_node != WALK_INPUT:
            out_edges[edge.src_node].append(edge)
    return in_edges, out_edges


def _carries_by_node(walk: Walk) -> dict[str, dict[str, GraphEdge]]:
    """node -> {input port: the carry feeding it from the previous iteration}."""
    carry_in: dict[str, dict[str, GraphEdge]] = {n: {} for n in walk.node_names}
    for loop, _ in walk.loops:
        for edge in loop.carry:
            carry_in[edge.dst_node][edge.dst_port] = edge
    return carry_in


def _streaming_inputs(in_edges: dict[str, dict[str, GraphEdge]], inner: dict[str, Loop]):
    """A streaming input (at most one per node) feeds either one run per chunk
    (stream_in) or, for a loop inside a component, PushChunk items into its one open
    run (pushed). Returns (stream_in, pushed), both node -> edge."""
    stream_in: dict[str, GraphEdge] = {}
    pushed: dict[str, GraphEdge] = {}
    for node, edges in in_edges.items():
        for edge in edges.values():
            if edge.is_streaming:
                (pushed if node in inner else stream_in)[node] = edge
    return stream_in, pushed


def _child_loops(walk: Walk) -> dict[str | None, list[Loop]]:
    """Enclosing loop name (None: top level) -> the loops directly inside it."""
    children: dict[str | None, list[Loop]] = {}
    for loop, outer in walk.loops:
        children.setdefault(outer[-1].name if outer else None, []).append(loop)
    return children
