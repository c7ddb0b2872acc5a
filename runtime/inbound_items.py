"""What each item of a Run stream does, on the engine thread of a component service.

An item is first scoped to its stream's request ids (runtime.request_scope) and checked
(ownership, capacity, draining: runtime.request_table); then an OpenNode resolves its
inputs and opens the run in the component, a PushChunk feeds an open run, the items of
routed edges (grants, routed pushes, batches) go to the routed edges, a Cancel drops the
request, a Release acknowledges leases, a Credit gives a parked run room, and the
optional component hooks hear of repacing, kept-context operations and refusals.

A bad item fails its request alone (a NodeError naming the field); the stream goes on.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from opentelemetry import trace

from core.errors import StarmeshError
from runtime.grpc_status import failure
from runtime.item_proto import Rejected
from runtime.items import AcceptRoute, Cancel, ContextOp, Credit, NodeError, OpenNode, PushChunk, Release, Repace
from runtime.parts import resolve_inputs
from runtime.push_batch import PushBatch

log = logging.getLogger(__name__)


class InboundItems:
    def __init__(self, table, component, transport, routed, credits, emit: Callable, fail: Callable,
                 cancel: Callable) -> None:
        """table: the runtime.request_table.RequestTable; routed: the runtime.routed_edges.
        RoutedEdges; credits: the runtime.backpressure.CreditGate; emit(stream, event),
        fail(request, node, status, message, iteration) and cancel(request) are the step
        loop's."""
        self.table, self.component, self.transport = table, component, transport
        self.routed, self.credits = routed, credits
        self.emit, self.fail, self.cancel = emit, fail, cancel

    def handle(self, stream_id: str, field: str, item: Any, is_draining: bool) -> None:
        """Applies one item of `stream_id` (field: where it sat in its message); is_draining:
        the service is shutting down (a new OpenNode is refused)."""
        item = self.table.scoped(stream_id, item)  # its request ids as this stream's (runtime.request_scope)
        refusal = self.table.refusal(stream_id, field, item, is_draining)
        if refusal is not None:
            if isinstance(item, OpenNode):
                self._refused(item)
            self.emit(stream_id, refusal)
            return
        if isinstance(item, Rejected):
            self.emit(stream_id, NodeError(item.request_id, item.node, item.status, item.message))
        elif isinstance(item, OpenNode):
            self._open(stream_id, field, item)
        elif isinstance(item, PushBatch):
            self.routed.push_batch(stream_id, field, item)
        elif isinstance(item, PushChunk) and item.route:
            self.routed.push(stream_id, field, item)
        elif isinstance(item, PushChunk):
            self._push(stream_id, field, item)
        elif isinstance(item, AcceptRoute):
            self.routed.accept(stream_id, item)
        elif isinstance(item, Cancel):
            self.cancel(item.request_id)
        elif isinstance(item, Repace):
            self._repace(item)
        elif isinstance(item, Release):
            self._release(field, item)
        elif isinstance(item, ContextOp):
            self._context_op(field, item)
        elif isinstance(item, Credit) and not self.routed.grant(item):
            self.credits.grant(item)

    def _open(self, stream_id: str, field: str, item: OpenNode) -> None:
        run, span = self.table.open_run(stream_id, item)
        reached = False  # whether component.open saw the item
        try:
            inputs = resolve_inputs(self.transport, item.inputs, f"{field}.open.inputs", run.handles,
                                    item.request_id)
            reached = True
            with trace.use_span(span, end_on_exit=False):  # a component may inject this span's context
                self.component.open(item, inputs)
            self.routed.opened(item)
        except Exception as e:
            if not reached:
                self._refused(item)
            self.fail(item.request_id, item.node, *failure(e, f"{field}.open (node {item.node})"), item.iteration)

    def _refused(self, item: OpenNode) -> None:
        """Tells a component that counts every run it is sent (a dlo_group member: its
        peers count theirs, services/dit/lockstep.py) that one was refused before open."""
        hook = getattr(self.component, "refused", None)
        if hook is not None:
            try:
                hook(item)
            except Exception:
                log.exception("component.refused(%s) failed", item.node)

    def _push(self, stream_id: str, field: str, item: PushChunk) -> None:
        run = self.table.runs.get((item.request_id, item.node, item.iteration))
        if run is None and self.table.owner(item.request_id) == stream_id and self.table.has_ended(
                item.request_id, item.node, item.iteration):
            # a chunk that crossed the run's NodeDone (its producer streams on): nothing wants
            # it; its leases go with the request, as every lease of a request does
            log.debug("push to ended run %s/%s%s dropped", item.request_id, item.node, item.iteration)
            return
        if run is None or self.table.owner(item.request_id) != stream_id:
            msg = f"{field}.push: node {item.node!r} of request {item.request_id!r} is not open"
            self.emit(stream_id, NodeError(item.request_id, item.node, "FAILED_PRECONDITION", msg, item.iteration))
            return
        try:
            tensors = resolve_inputs(self.transport, item.tensors, f"{field}.push.tensors", run.handles,
                                     item.request_id)
            self.component.push(item, tensors)
        except Exception as e:
            self.fail(item.request_id, item.node, *failure(e, f"{field}.push (node {item.node})"), item.iteration)

    def _repace(self, item: Repace) -> None:
        """The request's playback origin moved: chunk runs routed edges open from now on,
        and the component's queued work (`repace`, optional), are due relative to it."""
        self.routed.repace(item.request_id, item.origin_s)
        hook = getattr(self.component, "repace", None)
        if hook is not None:
            try:
                hook(item.request_id, item.origin_s)
            except Exception:
                log.exception("component.repace(%r) failed", item.request_id)

    def _context_op(self, field: str, item: ContextOp) -> None:
        """A kept context released or cut back (`context_op`, optional: components whose
        engine keeps contexts); a component without one has none to touch."""
        hook = getattr(self.component, "context_op", None)
        if hook is None:
            return
        try:
            hook(item)
        except StarmeshError as e:  # a context already dropped (its TTL, the limits) has nothing left to do
            log.info("%s.context_op: %s", field, e)

    def _release(self, field: str, item: Release) -> None:
        try:
            self.transport.release(list(item.lease_ids), request_id=item.request_id)
        except StarmeshError as e:
            # An ack for a lease already freed (e.g. after its carrier broke) is harmless.
            log.warning("%s.release: %s", field, e)
