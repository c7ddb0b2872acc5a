"""A component over the StatelessEngine: each node run is one work item.

A subclass says what an open node run becomes (`prepare(item, inputs) -> (key,
payload)`: validation happens here, so a bad request fails at open with a clear
field) and how a batch of payloads of one key runs (`run(key, payloads) -> outputs`,
one dict of tensors per payload). Each finished item leaves as NodeOutput + NodeDone
at the run's own iteration; a failing item (the engine retries a failed batch item by
item) leaves as NodeError, and only its request fails.
"""
from __future__ import annotations

from typing import Any, Hashable

from engine.stateless_engine import StatelessConfig, StatelessEngine, WorkItem, WorkResult
from runtime.grpc_status import failure
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode, OutboundEvent
from core.errors import InvalidArgument, ResourceExhausted


class StatelessComponent:
    name = "stateless"
    nodes: tuple[str, ...] = ()

    def __init__(self, config: StatelessConfig = StatelessConfig()) -> None:
        self.engine = StatelessEngine(self._run_batch, config)
        self.is_closed = False

    # ---- what a subclass provides --------------------------------------------------

    def prepare(self, item: OpenNode, inputs: dict[str, Any]) -> tuple[Hashable, Any]:
        """(batch key, payload) for a node run; raises InvalidArgument on bad input."""
        raise NotImplementedError

    def run(self, key: Hashable, payloads: list[Any]) -> list[dict[str, Any]]:
        """Outputs (port -> tensor) for each payload of one batch, in order."""
        raise NotImplementedError

    def weight(self, key: Hashable, payload: Any) -> int:
        """What a payload adds to a batch's work (StatelessConfig.max_batch_weight bounds the sum)."""
        return 1

    # ---- the component protocol (runtime.component) ------------------------------

    def open(self, item: OpenNode, inputs: dict[str, Any]) -> None:
        if item.node not in self.nodes:
            raise InvalidArgument(f"open.node {item.node!r}: the {self.name} component runs {list(self.nodes)}")
        key, payload = self.prepare(item, inputs)
        if not self.engine.can_add():
            raise ResourceExhausted(f"open: the {self.name} queue is full ({self.engine.num_queued} items)")
        self.engine.add(WorkItem(item.request_id, key, payload, tag=item, pace=item.pace,
                                 weight=self.weight(key, payload)))

    def push(self, item, tensors) -> None:
        raise InvalidArgument(f"push.node {item.node!r}: the {self.name} component takes no streamed input")

    def cancel(self, request_id: str) -> None:
        self.engine.abort(request_id)

    def repace(self, request_id: str, origin_s: float) -> None:
        self.engine.repace(request_id, origin_s)

    def has_work(self) -> bool:
        return self.engine.has_work()

    def step(self) -> list[OutboundEvent]:
        return [ev for result in self.engine.step() for ev in self.events_for(result)]

    def events_for(self, result: WorkResult) -> list[OutboundEvent]:
        """A finished work item -> the events of its node run (`tag` is its OpenNode)."""
        item: OpenNode = result.item.tag
        if not result.ok:
            status, message = failure(result.error, f"node {item.node}")
            return [NodeError(item.request_id, item.node, status, message, item.iteration)]
        return [NodeOutput(item.request_id, item.node, result.output, item.iteration),
                NodeDone(item.request_id, item.node, iteration=item.iteration)]

    def ready(self) -> bool:
        return not self.is_closed

    def load(self) -> dict:
        return {"queued": self.engine.num_queued}

    def close(self) -> None:
        self.is_closed = True
        self.engine.queue.clear()

    def _run_batch(self, items: list[WorkItem]) -> list[dict[str, Any]]:
        return self.run(items[0].key, [i.payload for i in items])
