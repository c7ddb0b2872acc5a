"""The runs of a chunk-fed consumer of a routed edge: one run per chunk of its granted
route, opened by this replica from the route's template (runtime.route_in), in stream
order. Chunks wait while the client is behind (a chunk-mode route's credits, granted by
the conductor): their producer is not credited meanwhile, so it parks at its window.
The runs of a per-item route share one span, made at the first.
"""
from __future__ import annotations

from typing import Callable

from opentelemetry import context as otel_context
from opentelemetry import trace

from runtime.batch_in import value_of
from runtime.grpc_status import failure
from runtime.items import Credit, PushChunk
from runtime.route_in import InRoute


class ChunkRuns:
    def __init__(self, inb, table, component, values: Callable, fail: Callable, finish: Callable) -> None:
        """inb: the runtime.route_in.InboundRoutes; table: the step loop's RequestTable;
        values(route, push, tensors, handles, field): a chunk's input values (resolved);
        fail(request, node, status, message, iteration): the step loop's; finish(route):
        the route's stream may have ended with its last run (the routed edges')."""
        self.inb, self.table, self.component = inb, table, component
        self.values, self.fail, self.finish = values, fail, finish

    def open(self, route: InRoute, push: PushChunk, tensors, field: str) -> None:
        """One run per chunk, in stream order; chunks wait while the client is behind
        (their producer is not credited meanwhile, so it parks at its window)."""
        if not route.waiting and not route.is_blocked:  # the usual case: nothing queued before it
            self._open_now(route, push, tensors, field)
            return
        route.waiting.append((push, tensors))
        self.drain(route, field)

    def drain(self, route: InRoute, field: str = "push") -> None:
        while route.waiting and not route.is_blocked:
            push, tensors = route.waiting.pop(0)
            self._open_now(route, push, tensors, field)

    def _open_now(self, route: InRoute, push: PushChunk, tensors, field: str) -> None:
        route.is_ended = route.is_ended or push.end_of_stream
        if not push.produced_us and not push.tensors and not tensors:  # the empty end-of-stream marker
            self.finish(route)
            return
        item = self.inb.chunk_run(route, push)
        if route.accept.per_item and route.span is None:
            route.span = self.table.node_span(item)
            route.span_context = trace.set_span_in_context(route.span)
        run, span = self.table.open_run(route.owner, item, route.span)  # None: the run's own span
        run.quiet_ports = item.quiet_ports
        try:
            values = self.values(route, push, tensors, run.handles, field)
            self.inb.record(route, push, value_of(push, tensors))
            if route.span_context is not None:  # the shared span: its context made once (~1 us, not ~3.5)
                token = otel_context.attach(route.span_context)
                try:
                    self.component.open(item, values)
                finally:
                    otel_context.detach(token)
            else:
                with trace.use_span(span, end_on_exit=False):
                    self.component.open(item, values)
        except Exception as e:
            self.fail(item.request_id, item.node, *failure(e, f"{field} (node {item.node})"), item.iteration)

    def grant(self, item: Credit) -> bool:
        """Client room for a chunk-mode route's outputs; False: not a route's."""
        route = self.inb.granted(item.request_id, item.node, item.iteration)
        if route is None:
            return False
        if item.port in route.credits:
            route.credits[item.port] += item.amount
            self.drain(route)
        return True
