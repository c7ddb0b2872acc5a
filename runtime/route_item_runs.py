"""Item runs: a per-item routed edge into a node its component maps item by item, fed
as ONE run per route instead of one run per item.

A component lists such nodes in `item_nodes`. For a granted per-item route (FixedChunk(1),
no pace) into one of them, this replica opens one run at the route's base iteration with
the stream as its input (`OpenNode.stream`, no other inputs) as soon as the grant comes;
the route's pushes go into it as a loop run's do (`push`, or `push_rows` for a batch).
The component answers, for the k-th item it is pushed, one NodeOutput at iteration +
(k,), and one NodeDone for the run after the stream's end: what the route's chunk runs
would have answered together, without a run, a span and a NodeDone per item.

Credits: the producer is credited for an item once its output is out (not when it is
pushed), so the route's window bounds the items queued in the component as it bounds
running chunk runs; whatever is still owed when the run ends is settled then. A push's
resolved inputs are closed once its items are answered, their leases acknowledged with
that credit (a component keeps no pushed rows past its step, as the push contract says),
so a long stream holds no more of its producer's memory than its window. Client
credits (OpenNode.credits, then Credit items) are the run's own: the component is handed
no more items than the run may still answer (the rest wait here, uncredited, so the
producer parks at its window), and the step loop parks the run when they are spent. A
component may therefore answer every item it holds in one step.
"""
from __future__ import annotations

from typing import Callable

from opentelemetry import trace

from core.evolve import evolve
from runtime.grpc_status import failure
from runtime.items import AcceptRoute, Credit, StreamInput
from runtime.request_table import NodeRun
from runtime.route_in import InboundRoutes, InRoute


class ItemRuns:
    def __init__(self, inb: InboundRoutes, table, component, gate, fail: Callable, credit: Callable,
                 feed: Callable) -> None:
        """table: the step loop's RequestTable; gate: its runtime.backpressure.CreditGate;
        fail(request, node, status, message, iteration): the step loop's; credit(route,
        amount, consumed) and feed(route, push, tensors, field): the routed edges'."""
        self.inb, self.table, self.component, self.gate = inb, table, component, gate
        self.fail, self.credit, self.feed = fail, credit, feed
        self.nodes = frozenset(getattr(component, "item_nodes", ()))

    def takes(self, item: AcceptRoute) -> bool:
        """The grant is fed as one run: a per-item, unpaced route into an item node."""
        return (item.run.node in self.nodes and not item.push and item.per_item
                and item.run.pace is None)

    def open(self, route: InRoute) -> None:
        """The route's one run: the grant's template with the stream as its input."""
        route.item_run = True
        item = evolve(route.accept.run, inputs={}, stream=StreamInput(route.accept.port))
        run, span = self.table.open_run(route.owner, item)
        try:
            with trace.use_span(span, end_on_exit=False):
                self.component.open(item, {})
        except Exception as e:
            self.fail(item.request_id, item.node, *failure(e, f"accept (node {item.node})"), item.iteration)

    def has_room(self, route: InRoute, run, num_items: int) -> bool:
        """The run may take `num_items` more: nothing waits before them and its client
        credits cover every item it holds (run: its request table NodeRun)."""
        if route.waiting:
            return False
        if not run.credits:
            return True
        return route.num_pending + num_items <= min(run.credits.values())

    def hold(self, route: InRoute, num_items: int) -> list:
        """The list a push's resolved inputs go in: closed (their leases acknowledged to
        the producer with its credit) once its `num_items` items are answered."""
        route.num_pending += num_items
        handles: list = []
        if num_items:
            route.held.append([num_items, handles])
        return handles

    def grant(self, item: Credit) -> bool:
        """Client room for an item run (False: the Credit is not for one): the run's
        credit grows (it resumes), then the pushes held for it go in, in order."""
        route = self.inb.pushing_into(item.request_id, item.node, item.iteration) if item.node in self.nodes else None
        if route is None or not route.item_run:
            return False
        self.gate.grant(item)
        waiting, route.waiting = route.waiting, []
        for push, tensors in waiting:
            self.feed(route, push, tensors, "push")
        return True

    def output(self, request_id: str, node: str, iteration: tuple[int, ...]) -> None:
        """An output at base + (k,): its item is done, and its producer credited."""
        route = self.inb.pushing_into(request_id, node, iteration[:-1]) if iteration else None
        if route is not None and route.item_run and route.num_pending > 0:
            route.num_pending -= 1
            head = route.held[0]
            head[0] -= 1
            if head[0]:
                self.credit(route, 1, ())
            else:  # the push's last item: its inputs are done with
                route.held.popleft()  # an inline push resolved to no handle: nothing to close
                self.credit(route, 1, NodeRun(handles=head[1]).close() if head[1] else ())

    def ended(self, route: InRoute, consumed) -> None:
        """The run ended: the items it never answered, and the leases it consumed, are
        credited back at once (nothing owed is lost)."""
        route.is_finished = True  # from now on every credit goes at once
        owed, route.num_pending = route.num_pending, 0
        consumed = tuple(consumed) + self._release(route)
        if owed or consumed:
            self.credit(route, owed, consumed)

    def cancel(self, request_id: str) -> None:
        """The request is gone: its item runs' held inputs are closed (its leases go
        with the request at their producers)."""
        for route in self.inb.routes.values():
            if route.request_id == request_id and route.held:
                self._release(route)

    @staticmethod
    def _release(route: InRoute) -> tuple:
        """Closes every input the route's run still holds; the leases they consumed."""
        consumed: tuple = ()
        while route.held:
            consumed += NodeRun(handles=route.held.popleft()[1]).close()
        return consumed

    def failed(self, request_id: str, node: str, iteration: tuple[int, ...]) -> None:
        """The run failed: its producer may still be streaming, and is owed what it sent
        (its later pushes are dropped and credited at once)."""
        route = self.inb.pushing_into(request_id, node, iteration)
        if route is not None and route.item_run and not route.is_finished:
            self.ended(route, ())
