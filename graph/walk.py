"""Named walks and the model: nodes, walks and the state machine that picks the next walk."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from graph.composites import Loop, Part, loops_in, node_names
from graph.edge import GraphEdge
from core.errors import GraphError
from graph.node import WALK_INPUT, WALK_OUTPUT, GraphNode, check_name


@dataclass(frozen=True)
class Walk:
    """One segment of a request's behaviour (prefill, decode, image_gen, ...).

    Edges from "input.<name>" take the walk's inputs (the request's inputs on the
    first walk, the previous walk's outputs afterwards); edges into "output.<name>"
    are the walk's outputs (streamed to the client as they are produced).
    """

    name: str
    body: Part
    edges: tuple[GraphEdge, ...] = ()

    def __post_init__(self) -> None:
        check_name("walk", self.name)
        object.__setattr__(self, "edges", tuple(self.edges))

    @property
    def node_names(self) -> list[str]:
        return node_names(self.body)

    @property
    def loops(self) -> list[tuple[Loop, tuple[Loop, ...]]]:
        return loops_in(self.body)

    def loop_path(self, node: str) -> tuple[Loop, ...]:
        """Loops enclosing `node`, outermost first (empty outside any loop)."""
        containing = [outer + (loop,) for loop, outer in self.loops if node in node_names(loop)]
        return max(containing, key=len, default=())

    def component_loops(self, inner_loops: frozenset[str]) -> dict[str, Loop]:
        """node -> the loop its component runs itself: a loop named in `inner_loops`
        whose body is that one node and whose stop needs no conductor-side predicate
        (one dispatch per entry, outputs tagged per iteration)."""
        out = {}
        for loop, _ in self.loops:
            body = node_names(loop)
            if loop.name in inner_loops and len(body) == 1 and (loop.stop is None or loop.stop.predicate is None):
                out[body[0]] = loop
        return out

    @property
    def input_names(self) -> list[str]:
        return sorted({e.src_port for e in self.edges if e.src_node == WALK_INPUT})

    @property
    def output_names(self) -> list[str]:
        return sorted({e.dst_port for e in self.edges if e.dst_node == WALK_OUTPUT})


# first_walk(request_inputs, wanted) -> walk name, where `wanted` is the output kinds the
# request asks for ("text", "audio", ...; empty: everything the model makes), so a request
# for text alone can skip the nodes that only make audio;
# next_walk(request_inputs, walk, outputs) -> walk name | None
FirstWalk = Callable[[dict[str, Any], frozenset[str]], str]
NextWalk = Callable[[dict[str, Any], str, dict[str, Any]], "str | None"]


def _single_walk(inputs, walk, outputs):
    return None


@dataclass(frozen=True)
class WalkGraph:
    """A model: nodes, named walks and the state machine over them.

    `first_walk` picks the walk a request starts with (a name, or a function of the
    request's inputs and the output kinds it wants); `next_walk(inputs, finished_walk, its_outputs)` the one after,
    None when the request is complete. Validated at construction (graph.validate).
    """

    name: str
    nodes: tuple[GraphNode, ...]
    walks: tuple[Walk, ...]
    first_walk: str | FirstWalk = ""
    next_walk: NextWalk = _single_walk
    node_by_name: dict[str, GraphNode] = field(init=False, repr=False)
    walk_by_name: dict[str, Walk] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from graph.validate import validate_graph

        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "walks", tuple(self.walks))
        object.__setattr__(self, "node_by_name", {n.name: n for n in self.nodes})
        object.__setattr__(self, "walk_by_name", {w.name: w for w in self.walks})
        if not self.first_walk:
            if len(self.walks) != 1:
                raise GraphError(f"graph {self.name}: first_walk is required with {len(self.walks)} walks")
            object.__setattr__(self, "first_walk", self.walks[0].name)
        validate_graph(self)

    def start(self, inputs: dict[str, Any], wanted: frozenset[str] = frozenset()) -> str:
        """The first walk of a request with `inputs` that wants outputs of kinds `wanted`
        (empty: all)."""
        name = self.first_walk if isinstance(self.first_walk, str) else self.first_walk(inputs, frozenset(wanted))
        if name not in self.walk_by_name:
            raise GraphError(f"graph {self.name}: first walk {name!r} is not a walk")
        return name

    @property
    def ends_after_first_walk(self) -> bool:
        """No request goes on to a second walk (which could read any output of the first)."""
        return self.next_walk is _single_walk

    def after(self, inputs: dict[str, Any], walk: str, outputs: dict[str, Any]) -> str | None:
        if walk not in self.walk_by_name:
            raise GraphError(f"graph {self.name}: finished walk {walk!r} is not a walk")
        name = self.next_walk(inputs, walk, outputs)
        if name is not None and name not in self.walk_by_name:
            raise GraphError(f"graph {self.name}: next walk {name!r} after {walk!r} is not a walk")
        return name
