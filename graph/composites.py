"""Composites: how nodes are grouped. Data flow is the edges; composites give order
(Sequential), concurrency and joins (Parallel) and iteration scopes (Loop,
DynamicLoop). Parts are node names or nested composites."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union

from graph.edge import GraphEdge, split_endpoint
from core.errors import GraphError
from graph.node import check_name

Part = Union[str, "Sequential", "Parallel", "Loop"]


def _parts(parts) -> tuple:
    for p in parts:
        if not isinstance(p, (str, Sequential, Parallel, Loop)):
            raise GraphError(f"composite part {p!r} is not a node name or a composite")
    return tuple(parts)


def node_names(part: Part) -> list[str]:
    """Every node name under `part`, in declaration order."""
    if isinstance(part, str):
        return [part]
    return [n for child in part.parts for n in node_names(child)]


def loops_in(part: Part, outer: tuple["Loop", ...] = ()) -> list[tuple["Loop", tuple["Loop", ...]]]:
    """Every loop under `part` with the loops enclosing it (outermost first)."""
    if isinstance(part, str):
        return []
    found = []
    inner = outer + (part,) if isinstance(part, Loop) else outer
    if isinstance(part, Loop):
        found.append((part, outer))
    for child in part.parts:
        found += loops_in(child, inner)
    return found


class Sequential:
    """Parts run in order; each edge between them goes forward."""

    def __init__(self, *parts: Part) -> None:
        self.parts = _parts(parts)

    def __repr__(self) -> str:
        return f"Sequential{self.parts!r}"


class Parallel:
    """Branches may run concurrently; a join node fires once every *required*
    branch's value for the same request and iteration has arrived."""

    def __init__(self, *parts: Part, required: tuple[str, ...] | None = None) -> None:
        self.parts = _parts(parts)
        self.required = tuple(required) if required is not None else None

    def __repr__(self) -> str:
        return f"Parallel{self.parts!r}"


@dataclass(frozen=True)
class StopRule:
    """When a DynamicLoop stops, decided per request after each iteration.

    watch: "node.port" whose value decides (a DynamicLoop requires it; a node run's copy
    of the rule, `runtime.items.OpenNode.stop_rule`, has none: the service watches its
    own output). stop_token_ids: stop once the value holds one of them (serialisable: a
    loop inside a service evaluates it there). predicate: a conductor-side rule on the
    watched value, for loops the conductor drives (never sent to a service).
    component_predicate: the name of a rule the component registered, evaluated inside
    the service (only for a loop that runs inside its component).
    """

    watch: str = ""
    stop_token_ids: tuple[int, ...] = ()
    predicate: Callable[[Any], bool] | None = None
    component_predicate: str = ""

    def __post_init__(self) -> None:
        if self.watch:
            split_endpoint(self.watch)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    def should_stop(self, value) -> bool:
        if self.predicate is not None and self.predicate(value):
            return True
        if self.stop_token_ids:
            import torch

            ids = torch.as_tensor(value).reshape(-1).tolist()
            return any(i in self.stop_token_ids for i in ids)
        return False


class Loop:
    """Runs its parts up to `max_iters` times per request.

    carry: back edges; src's value of iteration k feeds dst in iteration k + 1
        (iteration 0 takes dst's value from the edge that enters the loop).
    accumulate: "node.port"s whose values of every iteration are concatenated
        (dim 0) for consumers outside the loop; any other port leaving the loop
        delivers only its last iteration. A streaming edge leaving the loop gets
        every iteration's value as one item.
    """

    stop: StopRule | None = None

    def __init__(self, name: str, *parts: Part, max_iters: int, carry=(), accumulate=()) -> None:
        check_name("loop", name)
        # bool is an int subclass: max_iters=True is a mistake, not a bound of 1.
        if not isinstance(max_iters, int) or isinstance(max_iters, bool) or max_iters < 1:
            raise GraphError(f"loop {name}: max_iters must be a positive bound, got {max_iters!r}")
        self.name = name
        self.parts = _parts(parts)
        self.max_iters = max_iters
        self.carry = tuple(carry)
        for edge in self.carry:
            if not isinstance(edge, GraphEdge) or edge.is_streaming:
                raise GraphError(f"loop {name}: carry {edge!r} must be a plain GraphEdge")
        self.accumulate = tuple(accumulate)
        for endpoint in self.accumulate:
            split_endpoint(endpoint)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, max_iters={self.max_iters})"


class DynamicLoop(Loop):
    """A Loop that each request leaves on its own once `stop` says so."""

    def __init__(self, name: str, *parts: Part, max_iters: int, stop: StopRule, carry=(), accumulate=()) -> None:
        super().__init__(name, *parts, max_iters=max_iters, carry=carry, accumulate=accumulate)
        if not isinstance(stop, StopRule) or not stop.watch:
            raise GraphError(f"loop {name}: DynamicLoop needs a StopRule with a watch port")
        self.stop = stop
