"""Several components in one service process (co-location): e.g. the talker
and code2wav (`starmesh serve talker+codec`), or the SD3 text encoders, DiT and VAE.

`Colocated` routes each node run to the component that hosts the node; one engine
step steps every member that has work and returns their events as one batch. A
streaming edge between two members is handed over in-process by the step loop
(runtime.colocated_streams) when the placement co-locates them.
"""
from __future__ import annotations

from typing import Any

from runtime.items import OutboundEvent
from core.errors import InvalidArgument


class Colocated:
    def __init__(self, components: list[Any], name: str = "") -> None:
        self.components = list(components)
        self.name = name or "+".join(c.name for c in self.components)
        self.by_node: dict[str, Any] = {}
        for component in self.components:
            for node in component.nodes:
                if node in self.by_node:
                    raise ValueError(f"node {node} is hosted by both {self.by_node[node].name} and {component.name}")
                self.by_node[node] = component
        self.nodes = tuple(self.by_node)

    def _owner(self, node: str, where: str):
        if node not in self.by_node:
            raise InvalidArgument(f"{where}.node {node!r}: {self.name} runs {list(self.nodes)}")
        return self.by_node[node]

    def open(self, item, inputs) -> None:
        self._owner(item.node, "open").open(item, inputs)

    def refused(self, item) -> None:
        """A run refused before open (StepLoop), for a member that counts its runs."""
        owner = self.by_node.get(item.node)
        if owner is not None and hasattr(owner, "refused"):
            owner.refused(item)

    def push(self, item, tensors) -> None:
        self._owner(item.node, "push").push(item, tensors)

    def push_rows(self, batch) -> dict[int, Exception]:
        """Each member gets its own entries of the batch, in one call where it can."""
        from runtime.row_batch import push_each

        by_owner: dict[int, list[int]] = {}
        failures: dict[int, Exception] = {}
        for i, node in enumerate(batch.nodes):
            try:
                by_owner.setdefault(id(self._owner(node, "push")), []).append(i)
            except Exception as e:  # noqa: BLE001 - a node nobody here runs: that entry fails
                failures[i] = e
        for indices in by_owner.values():
            owner, part = self.by_node[batch.nodes[indices[0]]], batch.subset(indices)
            got = owner.push_rows(part) if hasattr(owner, "push_rows") else push_each(owner, part)
            failures.update({indices[j]: e for j, e in (got or {}).items()})
        return failures

    def cancel(self, request_id: str) -> None:
        for component in self.components:
            component.cancel(request_id)

    def repace(self, request_id: str, origin_s: float) -> None:
        for component in self.components:
            if hasattr(component, "repace"):
                component.repace(request_id, origin_s)

    def context_op(self, op) -> None:
        for component in self.components:
            if hasattr(component, "context_op"):
                component.context_op(op)

    def has_work(self) -> bool:
        return any(c.has_work() for c in self.components)

    def step(self) -> list[OutboundEvent]:
        return [ev for c in self.components if c.has_work() for ev in c.step()]

    def ready(self) -> bool:
        return all(c.ready() for c in self.components)

    def load(self) -> dict:
        """Every member's load (Component.load), summed where two report the same key."""
        out: dict = {}
        for c in self.components:
            for key, value in (c.load() if hasattr(c, "load") else {}).items():
                out[key] = out.get(key, 0) + value
        return out

    def close(self) -> None:
        for component in self.components:
            component.close()
