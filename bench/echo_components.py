"""Echo and sum components: the transport benchmark's services and the base of the
test fixtures. Served with e.g. `starmesh serve bench.echo_components:make_echo`.

Each finishes a node run in the step after its open: one NodeOutput, then NodeDone
(it no longer uses the inputs), so a caller sees exactly one RunResponse per step.
"""
from __future__ import annotations

import time

import torch

from core.errors import InvalidArgument
from runtime.items import NodeDone, NodeOutput, OpenNode, OutboundEvent, PushChunk


class QueuedComponent:
    """Base of the fixtures: open() computes the result, the next step() returns it."""

    def __init__(self, name: str, nodes: tuple[str, ...]) -> None:
        self.name = name
        self.nodes = nodes
        self.is_ready = True
        self.is_closed = False
        self._events: list[OutboundEvent] = []

    def compute(self, item: OpenNode, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def open(self, item: OpenNode, inputs: dict[str, torch.Tensor]) -> None:
        outputs = self.compute(item, inputs)
        self._events += [
            NodeOutput(item.request_id, item.node, outputs, item.iteration),
            NodeDone(item.request_id, item.node, iteration=item.iteration),
        ]

    def push(self, item: PushChunk, tensors: dict[str, torch.Tensor]) -> None:
        raise InvalidArgument(f"push.port {item.port!r}: node {item.node} has no streaming inputs")

    def cancel(self, request_id: str) -> None:
        self._events = [e for e in self._events if e.request_id != request_id]

    def has_work(self) -> bool:
        return bool(self._events)

    def step(self) -> list[OutboundEvent]:
        events, self._events = self._events, []
        return events

    def ready(self) -> bool:
        return self.is_ready

    def close(self) -> None:
        self.is_closed = True


class Echo(QueuedComponent):
    def __init__(self, name: str = "echo") -> None:
        super().__init__(name, ("echo",))

    def compute(self, item, inputs):
        return dict(inputs)  # the step loop exports (copies) them before NodeDone frees the inputs


class Sum(QueuedComponent):
    """The sum of each input as a float32 0-d tensor. float32 inputs are summed
    natively (as fast as the bench's memcpy baseline: a float64 cast costs ~30x);
    others are accumulated in float64. The wire has no float64 (transport.dtypes)."""

    def __init__(self, name: str = "sum") -> None:
        super().__init__(name, ("sum",))

    def compute(self, item, inputs):
        return {
            k: v.sum() if v.dtype == torch.float32 else v.to(torch.float64).sum().to(torch.float32)
            for k, v in inputs.items()
        }


class Slow(Echo):
    """Echo whose result is due params["delay_s"] after open, or after params["busy_s"] of
    this replica's time: busy requests are served one after another, as an engine at
    capacity would (what makes throughput grow with replicas in bench.membership)."""

    def __init__(self) -> None:
        super().__init__("slow")
        self._due: list[tuple[float, list[OutboundEvent]]] = []
        self._free_at = 0.0  # when the busy requests queued so far are done

    def open(self, item, inputs):
        super().open(item, inputs)
        events, self._events = self._events, []
        now = time.monotonic()
        due = now + float(item.params.get("delay_s", 0))
        busy_s = float(item.params.get("busy_s", 0))
        if busy_s > 0:
            self._free_at = due = max(self._free_at, now) + busy_s
        self._due.append((due, events))

    def cancel(self, request_id):
        self._due = [(t, evs) for t, evs in self._due if evs[0].request_id != request_id]

    def has_work(self) -> bool:
        return bool(self._due)

    def step(self):
        time.sleep(0.005)  # the engine would compute here; keeps the wait off a busy loop
        now = time.monotonic()
        ready = [evs for t, evs in self._due if t <= now]
        self._due = [(t, evs) for t, evs in self._due if t > now]
        return [ev for evs in ready for ev in evs]


def make_echo() -> Echo:
    return Echo()


def make_sum() -> Sum:
    return Sum()


def make_slow() -> Slow:
    return Slow()
