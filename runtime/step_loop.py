"""The engine thread of a component service.

The grpc.aio event loop only converts messages and enqueues them here
(`attach`, `submit`, `detach` never block). This thread does everything that
may block or burn CPU: resolving TensorRefs (a Mooncake transfer), the
component's open/push/cancel/step, exporting outputs. Each iteration drains
the inbox (what each item does: runtime.inbound_items), runs at most one
`component.step()`, and hands each stream the events of that iteration as ONE
batch (one RunResponse per step per stream).

Failure isolation: a bad item or reference fails its request with a NodeError
(status from the StarmeshError, message naming the field); any other exception
from the component fails the affected requests with INTERNAL. The thread and
the streams stay up.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

from opentelemetry import trace

from runtime.backpressure import CreditGate
from runtime.columnar_outputs import ColumnarOutputs
from runtime.component import Component
from runtime.grpc_status import failure
from runtime.heartbeat import QueuedOpens, known_requests
from runtime.inbound_items import InboundItems
from runtime.inbox import Inbox
from runtime.items import NodeDone, NodeError, NodeOutput, NodeOutputs, OutboundEvent
from runtime.loop_calls import LoopCalls
from runtime.outbox import Outbox, Sink
from runtime.request_table import RequestTable
from runtime.routed_edges import RoutedEdges
from transport.config import CLIENT_HOST

log = logging.getLogger(__name__)

Entry = tuple[str, Any]  # (field path such as "items[2]", inbound item or Rejected)
_STOP = object()


class StepLoop:
    """Runs `component` on a dedicated thread; streams feed it through an inbox."""

    def __init__(self, component: Component, transport: Any, tracer: trace.Tracer | None = None,
                 peers: Any = None, max_requests: int = 1024, loop_calls: LoopCalls | None = None) -> None:
        """peers: the Run streams to peer replicas that routed edges push on
        (runtime.peer_links); None in a process that has none. max_requests: requests
        this replica holds at once; an OpenNode for one more is RESOURCE_EXHAUSTED.
        loop_calls: how sinks and peer links reach their event loop from this thread
        (flushed once per iteration; the peer links' own, when there are any)."""
        self.component = component
        self.transport = transport
        self.loop_calls = loop_calls or LoopCalls()
        self._table = RequestTable(tracer or trace.NoOpTracer(), max_requests)
        self._outbox = Outbox()
        self._credits = CreditGate(self._table, component)
        self.routed = RoutedEdges(self._table, component, transport, self._credits, self._emit, self._fail,
                                  self._cancel, peers, tracer)
        self._items = InboundItems(self._table, component, transport, self.routed, self._credits, self._emit,
                                   self._fail, self._cancel)
        self._columns = ColumnarOutputs(self._table, transport, self.routed, self._credits, self._output,
                                        self._outbox.emit, self._fail)
        self._inbox = Inbox()
        self._queued = QueuedOpens()
        self._is_draining = False
        # Engine-thread time inside component.step() and steps taken, since start: the
        # rate of busy_s is the step utilisation (1.0: the engine never waits for work).
        # Written on the engine thread only; a float read elsewhere is a momentary value.
        self.busy_s = 0.0
        self.num_steps = 0
        self._thread = threading.Thread(target=self._run, name=f"step-loop-{component.name}", daemon=True)

    # ---- called from the event loop (thread-safe, never blocks) ----------------

    def start(self) -> None:
        self._thread.start()

    def attach(self, stream_id: str, sink: Sink) -> None:
        self._put(("attach", stream_id, sink))

    def submit(self, stream_id: str, entries: list[Entry]) -> None:
        if entries:
            self._queued.queued(stream_id, entries)
            self._put(("items", stream_id, entries))

    def finish(self, stream_id: str) -> None:
        """The client half-closed: end the stream once its open node runs ended."""
        self._put(("finish", stream_id, None))

    def detach(self, stream_id: str) -> None:
        """The stream ended or broke: cancel what it carried, free its leases."""
        self._put(("detach", stream_id, None))

    def name_stream(self, stream_id: str, name: str) -> None:
        """A peer stream's producer named itself (its errors name it)."""
        self._put(("sender", stream_id, name))

    def peer_events(self, peer: str, events: list) -> None:
        """Credits (or refusals) from a peer replica that routed edges push to."""
        self._put(("peer_events", peer, events))

    def peer_broken(self, peer: str, message: str) -> None:
        self._put(("peer_broken", peer, message))

    def drain(self) -> None:
        """Graceful shutdown began: new OpenNodes get UNAVAILABLE, open work finishes."""
        self._is_draining = True

    def known_requests(self, stream_id: str) -> tuple[str, ...]:
        """The requests a stream's heartbeat lists, by the ids it named (runtime.heartbeat); event loop."""
        return known_requests(self._queued, stream_id, self._table.streams, self._table.wire_id)

    @property
    def num_queued(self) -> int:
        """Messages waiting for the engine thread (the servicer stops reading past a bound)."""
        return self._inbox.num_pending

    @property
    def num_open_requests(self) -> int:
        """Requests known on this replica (read without a lock: a momentary count)."""
        return len(self._table.requests)

    def wait_idle(self, timeout: float | None) -> bool:
        """Blocks until no node run is open and the inbox is empty (or timeout)."""
        return self._inbox.wait_idle(timeout)

    def stop(self, timeout: float | None = None) -> None:
        """Detaches every stream (cancelling its requests) and ends the thread."""
        if self._thread.is_alive():
            self._put(_STOP)
            self._thread.join(timeout)

    def _put(self, msg: Any) -> None:
        self._inbox.put(msg)

    # ---- engine thread ------------------------------------------------------

    def _run(self) -> None:
        while True:
            # Block on the inbox only when the component has nothing to do: no polling.
            msg = self._inbox.next_nowait() if self._has_work() else self._inbox.get()
            while msg is not None:
                if msg is _STOP:
                    self._stop_streams()
                    return
                self._handle(msg)
                msg = self._inbox.next_nowait()
            if self._has_work():
                self._step()
            self.routed.sender.flush()  # one message per peer for this iteration's pushes
            self._outbox.flush(self._table.has_runs)
            self.loop_calls.flush()  # one wake-up of the event loop for all of the above
            self._inbox.update_idle(bool(self._table.runs))

    def _handle(self, msg: Any) -> None:
        kind, stream_id, payload = msg
        try:
            if kind == "attach":
                self._outbox.attach(stream_id, payload)
                self._table.add_stream(stream_id)
            elif kind == "detach":
                self._detach(stream_id)
            elif kind == "finish":
                self._outbox.finish(stream_id)
            elif kind == "sender":
                self.routed.names[stream_id] = payload
            elif kind == "peer_events":
                self.routed.sender.on_events(stream_id, payload)
            elif kind == "peer_broken":
                self.routed.sender.on_broken(stream_id, payload)
            else:
                try:
                    for field, item in payload:
                        self._items.handle(stream_id, field, item, self._is_draining)
                finally:
                    self._queued.handled(stream_id, payload)
        finally:
            self._inbox.handled()

    def _drop_in_component(self, request_id: str) -> None:
        """The component (and its routed edges) forget the request; never raises."""
        self.routed.cancel(request_id)
        try:
            self.component.cancel(request_id)
        except Exception:
            log.exception("component.cancel(%r) failed", request_id)

    def _cancel(self, request_id: str) -> None:
        self._drop_in_component(request_id)
        self._table.drop_request(request_id, "cancelled")
        self._call_transport("release_request", request_id)

    def _detach(self, stream_id: str) -> None:
        self._queued.forget(stream_id)
        self.routed.stream_gone(stream_id)
        self._outbox.detach(stream_id)
        for rid in self._table.drop_stream(stream_id):
            self._drop_in_component(rid)
            # leases it sent on peer links (another carrier): their consumer dropped
            # the request too and will not acknowledge them
            self._call_transport("release_request", rid)
        self._call_transport("release_carrier", stream_id)

    def _stop_streams(self) -> None:
        for stream_id in list(self._table.streams):
            self._detach(stream_id)
        self._inbox.set_idle()

    def _call_transport(self, method: str, arg: str) -> None:
        try:
            getattr(self.transport, method)(arg)
        except Exception:
            log.exception("transport.%s(%r) failed", method, arg)

    # ---- stepping and outbound events ---------------------------------------

    def _has_work(self) -> bool:
        try:
            return bool(self.component.has_work())
        except Exception as e:
            self._fail_everything(e, "component.has_work")
            return False

    def _step(self) -> None:
        t0 = time.perf_counter()
        try:
            events = self.component.step()
        except Exception as e:
            self._fail_everything(e, "component.step")
            return
        finally:
            self.busy_s += time.perf_counter() - t0
            self.num_steps += 1
        for ev in events:
            self._postprocess(ev)

    def _fail_everything(self, exc: Exception, where: str) -> None:
        """The component failed outside any one request: every request with an open
        node run fails (any of them may have been in the batch), and the component
        drops them so it does not fail the same way again."""
        status, message = failure(exc, where)
        for rid in sorted({key[0] for key in self._table.runs}):
            for key in [k for k in self._table.runs if k[0] == rid]:
                self._fail(rid, key[1], status, message, key[2])
            self._drop_in_component(rid)

    def _postprocess(self, ev: OutboundEvent) -> None:
        if isinstance(ev, NodeOutputs):
            self._columns.handle(ev)
            return
        state = self._table.requests.get(ev.request_id)
        if state is None:
            return  # cancelled or its stream ended meanwhile: nobody to tell
        if isinstance(ev, NodeOutput):
            self._output(state, ev)
        elif isinstance(ev, NodeDone):
            chunk_run = self.routed.is_chunk_run(ev.request_id, ev.node, ev.iteration)
            consumed = self._table.end_run(ev.request_id, ev.node, ev.iteration, remember=not chunk_run)
            done = self.routed.run_done(ev, consumed)
            if done is not None:
                self._emit(state.stream_id, done)
        elif isinstance(ev, NodeError):
            self._fail(ev.request_id, ev.node, ev.status, ev.message, ev.iteration)

    def _output(self, state, ev: NodeOutput, found: Any = False) -> None:
        """Routed ports go to their consumers; the rest, exported, to the stream: a port
        the conductor or its client reads (client_ports) inline, any other for the hosts
        of the services that read it (shared memory on this host, Mooncake across).
        found: the run's RequestTable.run_of, when the caller has looked it up."""
        if found is False:
            found = self._table.run_of(ev.request_id, ev.node, ev.iteration)
        run = found[1] if found else None
        known = run if run is not None else state  # a run's own, else the request's last opened
        hosts, client_ports = known.consumer_host_ids, known.client_ports
        to_client = (*hosts, CLIENT_HOST) if client_ports else hosts
        # no service reads this node's outputs: its unread ports (a chat walk's prompt
        # rows) go as its client ports do, not parked in the arena until the request ends
        others = hosts or to_client
        try:
            tensors = self.routed.output_for_owner(ev.request_id, ev.node, ev.iteration, ev.tensors, run)
            refs = {
                name: self.transport.export(t, request_id=ev.request_id, carrier=state.stream_id,
                                            consumer_host_ids=to_client if name in client_ports else others)
                for name, t in tensors.items()
            }
        except Exception as e:
            self._fail(ev.request_id, ev.node, *failure(e, f"output {ev.node}"), ev.iteration)
            return
        self._credits.spend(ev.tensors, found)
        if refs or not ev.tensors:
            # produced_us: when the output was produced, for the conductor's edge latency spans
            # (a field, not metadata: a Struct per output cost both ends more than the output).
            self._emit(state.stream_id, NodeOutput(ev.request_id, ev.node, refs, ev.iteration, ev.metadata,
                                                   time.time() * 1e6))

    def _fail(self, request_id: str, node: str, status: str, message: str, iteration: tuple[int, ...] = ()) -> None:
        """NodeError for one node run; a NodeDone follows when the run had consumed
        leases of other arenas, so their producers can free them."""
        stream_id = self._table.owner(request_id)
        consumed = self._table.end_run(request_id, node, iteration, error=message)
        self.routed.run_failed(request_id, node, iteration, message)
        if stream_id is None:
            return
        self._emit(stream_id, NodeError(request_id, node, status, message, iteration))
        if consumed:
            self._emit(stream_id, NodeDone(request_id, node, consumed, iteration))

    def _emit(self, stream_id: str, ev: OutboundEvent) -> None:
        if len(self._table.scopes) and ev.request_id:  # a local id goes back as the id the stream named
            wire = self._table.scopes.wire_for(stream_id, ev.request_id)
            if wire != ev.request_id:
                ev = replace(ev, request_id=wire)
        self._outbox.emit(stream_id, ev)
