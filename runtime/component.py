"""The interface a component service hosts.

A component owns one or more graph nodes and the engine that runs them. The
service base (`runtime.step_loop`) calls it from ONE dedicated engine thread,
so an implementation needs no locking against itself; it never sees protobuf,
gRPC or tensor references: inputs arrive resolved as torch tensors, outputs
leave as torch tensors and the step loop exports them.

Protocol, per request and node:
  open(item, inputs)  -> the node run starts; `inputs` may be zero-copy views of
                         another process's memory, valid until the component
                         emits NodeDone for (request, node);
  push(item, tensors) -> streamed chunks for an open node;
  step()              -> one engine iteration over everything open; returns the
                         events it produced (NodeOutput, NodeError, NodeDone);
  cancel(request_id)  -> drop every piece of state of that request, emit nothing.
A node run is (request, node, iteration); events carry the run's iteration (a loop
run inside the component tags each iteration's output with iteration + (k,) and
ends with NodeDone at the run's own iteration). A component emits NodeDone for a
run once it no longer uses its inputs; after NodeDone or NodeError they are released.
A port value sent in parts (a chunk of streamed items, an accumulated loop output)
arrives concatenated along dim 0 (runtime.parts).

Columnar outputs (optional): step() may return a step's outputs of one node as ONE
NodeOutputs (request ids, iterations, and each port's values stacked [N, ...], a row per
entry) instead of N NodeOutputs; the runtime treats it as the outputs it stands for, and
sends the entries bound only for the client on without an object per entry
(runtime.columnar_outputs).

Batched pushes (optional): a component with `push_rows(batch) -> {entry: error}` gets
every entry of a peer's engine step that feeds one of its open loop runs in one call,
the rows stacked as they arrived (runtime.row_batch); one without it gets a `push` per
entry. An entry it refuses fails its own request alone.

Load (optional): a component with `load() -> dict[str, number]` reports its engine's
state in Describe (KV blocks used/total, requests waiting/running/parked, queue depth).

Backpressure (optional): a component that has `park(request_id, node, iteration)`
and `resume(...)` skips a parked run in step() until resumed; the step loop parks a
run whose output credit (OpenNode.credits, Credit items) is spent. Other runs and
the stream go on. A component without them is never parked.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from runtime.items import OpenNode, OutboundEvent, PushChunk

if TYPE_CHECKING:
    import torch


@runtime_checkable
class Component(Protocol):
    """What `starmesh serve` hosts. A structural interface: no base class needed."""

    name: str  # service name: OTel `service.name`, Describe, health service names
    nodes: tuple[str, ...]  # graph nodes this component runs

    def open(self, item: OpenNode, inputs: dict[str, "torch.Tensor"]) -> None:
        """Starts a node run. Raising fails only this request (NodeError)."""

    def push(self, item: PushChunk, tensors: dict[str, "torch.Tensor"]) -> None:
        """Feeds a streamed input chunk to an open node run."""

    def cancel(self, request_id: str) -> None:
        """Drops all state of `request_id` (KV blocks, buffers); emits nothing."""

    def has_work(self) -> bool:
        """True while step() would make progress; the engine thread sleeps otherwise."""

    def step(self) -> list[OutboundEvent]:
        """Runs one engine iteration; NodeOutput tensors are torch tensors."""

    def ready(self) -> bool:
        """True once weights are loaded and the engine can serve (health SERVING)."""

    def close(self) -> None:
        """Frees engine resources at shutdown; called once, after the last step."""
