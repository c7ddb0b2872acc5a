"""`GraphNode`: a component invocation with named input and output ports."""
from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import GraphError

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Reserved node names: edges from "input.<name>" carry walk inputs, edges into
# "output.<name>" are walk outputs (streamed to the client / the state machine).
WALK_INPUT, WALK_OUTPUT = "input", "output"


def check_name(kind: str, name: str) -> None:
    if not NAME.match(name or ""):
        raise GraphError(f"{kind} name {name!r} is not an identifier")


@dataclass(frozen=True)
class GraphNode:
    """A node of the walk graph.

    stateful: holds per-request context on its replica (KV cache): every run of a
        request goes to the replica that admitted it.
    speculative: a conductor-driven loop may prepare this node's iteration k+1
        before iteration k's stop decision (off for nodes with visible side effects).
    """

    name: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    stateful: bool = False
    speculative: bool = True

    def __post_init__(self) -> None:
        check_name("node", self.name)
        if self.name in (WALK_INPUT, WALK_OUTPUT):
            raise GraphError(f"node name {self.name!r} is reserved for walk inputs/outputs")
        for kind, ports in (("input", self.inputs), ("output", self.outputs)):
            for port in ports:
                check_name(f"node {self.name} {kind} port", port)
            if len(set(ports)) != len(ports):
                raise GraphError(f"node {self.name}: duplicate {kind} port in {list(ports)}")
