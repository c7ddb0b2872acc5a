"""Routed streaming edges on the engine thread: the one chunk dispatcher of a service.

Producer half (runtime.route_out): outputs of a run with routes are cut into chunks and
pushed to the consumer: handed over in this process when the route's peer is "" (a
co-located consumer: tensors stay tensors), else sent as one columnar PushBatch per peer
per engine iteration (runtime.route_sender, runtime.push_batch) on the peer's link
(runtime.peer_links; runtime.local_peers between engine threads of one process).
Credits and lease acknowledgements come back on that link; a run whose route window is
full is parked.

Consumer half (runtime.route_in): a granted route's pushes feed the open loop run, open
one run per chunk (runtime.route_chunk_runs), or feed one run of a node its component maps
item by item (runtime.route_item_runs). A batch's entries for open runs reach a component
with `push_rows` in one call (runtime.row_batch). Chunk runs answer nobody per run: when
the stream has ended and every chunk run is done, one NodeDone for the node at the
route's base iteration (with the edge's statistics) goes to the conductor that granted
the route, and the edge's span is emitted here, in the request's trace.
"""
from __future__ import annotations

from typing import Any, Callable

from opentelemetry import trace

from core.errors import StarmeshError
from runtime.batch_in import BatchRows, close_unused, entries, resolve_rows, value_of
from runtime.grpc_status import failure
from runtime.items import AcceptRoute, Credit, NodeDone, NodeError, OpenNode, PushChunk, RouteCredit
from runtime.parts import resolve_inputs
from runtime.push_batch import PushBatch
from runtime.route_chunk_runs import ChunkRuns
from runtime.route_item_runs import ItemRuns
from runtime.route_sender import PeerSender
from runtime.row_batch import RowCollector
from runtime.route_in import InboundRoutes, InRoute, RoutePermissionDenied
from runtime.route_out import OutboundRoutes, Send

LOCAL = "local"  # the sender of this process's own pushes (co-located consumers)


class RoutedEdges:
    def __init__(self, table, component, transport, gate, emit: Callable, fail: Callable, drop: Callable,
                 peers: Any = None, tracer: trace.Tracer | None = None) -> None:
        """emit(stream, event), fail(request, node, status, message, iteration) and
        drop(request) are the step loop's; peers posts batches to peer replicas."""
        self.table, self.component, self.transport, self.gate = table, component, transport, gate
        self.emit, self.fail, self.drop = emit, fail, drop
        self.peers = peers
        self.tracer = tracer or trace.NoOpTracer()
        self.out = OutboundRoutes()
        self.inb = InboundRoutes(table.wire_id)
        self.names: dict[str, str] = {}  # peer stream -> the producer's own name
        self.sender = PeerSender(self.out, transport, peers, gate, fail, drop, self._credit_now)
        self.chunks = ChunkRuns(self.inb, table, component, self._values, fail, self._maybe_finish)
        self.items = ItemRuns(self.inb, table, component, gate, fail, self._credit, self._push_into_run)
        # while a PushBatch is applied to a component with push_rows: (its rows,), and the
        # collector of its entries for open loop runs (made at the first)
        self._batch: tuple | None = None
        self._rows_in: RowCollector | None = None

    # ---- consumer half ----------------------------------------------------------

    def accept(self, stream_id: str, item: AcceptRoute) -> None:
        run = item.run
        self.table.adopt(stream_id, run.request_id, run.consumer_host_ids, run.client_ports)
        if not item.push:  # the chunk runs' own routes (two routed edges in a row)
            self.out.open(run.request_id, run.node, run.iteration, run.routes)
        held = self.inb.accept(stream_id, item)
        if self.items.takes(item):
            self.items.open(self.inb.routes[item.token])
        refused = self.inb.refusal(item.token)
        if refused is not None:
            self._refuse(refused[0], self.inb.routes[item.token], refused[1])
        for sender, name, push, tensors in held:
            self._apply(sender, name, push, tensors)

    def _refuse(self, stream_id: str, route: InRoute, e: StarmeshError) -> None:
        """A batch from stream_id naming this route was refused whole: its request fails
        on both sides, unless another stream sends on the route or it has ended."""
        if route.sender in ("", stream_id) and self.table.owner(route.request_id) == route.owner:
            run = route.accept.run
            self.emit(stream_id, NodeError(run.request_id, run.node, e.status, str(e), run.iteration))
            self.fail(run.request_id, run.node, e.status, str(e), run.iteration)

    def push(self, stream_id: str, field: str, item: PushChunk) -> None:
        self._apply(stream_id, self.names.get(stream_id, stream_id), item, None, field)

    def push_batch(self, stream_id: str, field: str, batch: PushBatch) -> None:
        """A peer's engine step: each entry goes its route's way, as a push would."""
        name = self.names.get(stream_id, stream_id)
        try:
            rows, shared, checked = resolve_rows(self.transport, batch, f"{field}.batch")
        except StarmeshError as e:  # nothing in it can be trusted: every request it names fails
            for rid in dict.fromkeys(batch.route_ids()):  # each route once, in order
                route = self.inb.by_id.get(rid)
                if route is None:
                    self.inb.refuse_ungranted(stream_id, rid, e)
                else:
                    self._refuse(stream_id, route, e)
            return
        self._batch = (rows,) if hasattr(self.component, "push_rows") else None
        try:
            for rid, push, values in entries(batch, rows, shared, checked, self.inb.by_id):
                self._apply(stream_id, name, push, values, f"{field}.batch", rid)
        finally:
            rows_in, self._rows_in, self._batch = self._rows_in, None, None
        for i, got, e in rows_in.flush(self.component) if rows_in is not None else ():
            node = got.nodes[i]
            self.fail(got.request_ids[i], node, *failure(e, f"{field} (node {node})"), got.iterations[i])

    def _apply(self, sender: str, name: str, push: PushChunk, tensors, field: str = "push",
               rid: int | None = None) -> None:
        try:
            route = self.inb.claim(sender, name, push, tensors, rid)
        except RoutePermissionDenied as e:
            close_unused(tensors)
            known = self.inb.by_id.get(rid) if rid is not None else None
            request_id, node = (known.request_id, known.accept.run.node) if known else (push.request_id, push.node)
            self.emit(sender, NodeError(request_id, node, e.status, f"{field}: {e}", push.iteration))
            return
        if route is None:
            return  # waits for its grant
        if self.table.owner(route.request_id) != route.owner:
            close_unused(tensors)  # the request was cancelled meanwhile
            return
        if push.request_id != route.request_id:  # held before its grant, or named by the id its stream knows
            push = self.inb.identify(route, push)
        if route.feeds_one_run:
            self._push_into_run(route, push, tensors, field)
        else:
            self.chunks.open(route, push, tensors, field)

    def _values(self, route: InRoute, push: PushChunk, tensors, handles: list, field: str) -> dict:
        if isinstance(tensors, BatchRows):  # a batch entry: rows already resolved
            return tensors.values(push.port, handles, route.arenas)
        if tensors is not None:  # this process's own push: tensors, no transport
            return tensors
        return resolve_inputs(self.transport, push.tensors, f"{field}.tensors", handles, push.request_id)

    def _push_into_run(self, route: InRoute, push: PushChunk, tensors, field: str) -> None:
        key = (push.request_id, push.node, push.iteration)
        run = self.table.runs.get(key)
        if run is not None and route.item_run and not self.items.has_room(route, run, len(push.produced_us)):
            route.waiting.append((push, tensors))  # past its client credit: held, its producer not credited
            return
        if run is None:
            if self.table.has_ended(*key):  # the loop stopped first (a talker at codec EOS)
                close_unused(tensors)
                self._credit(route, len(push.produced_us), ())
            else:  # the conductor opens the loop run when its other inputs are ready
                route.waiting.append((push, tensors))
            return
        # an item run frees each item's inputs once it is answered; a loop run at its end
        handles = self.items.hold(route, len(push.produced_us)) if route.item_run else run.handles
        try:
            if self._batch is not None:  # a batch's entry: one push_rows call for the batch
                if self._rows_in is None:
                    self._rows_in = RowCollector(self._batch[0])
                if tensors is not None:
                    tensors.hold(handles, route.arenas)
                self.inb.record(route, push, tensors)
                self._rows_in.add(push, tensors)
            else:
                values = self._values(route, push, tensors, handles, field)
                self.inb.record(route, push, value_of(push, tensors))
                self.component.push(push, values)
        except Exception as e:
            self.fail(push.request_id, push.node, *failure(e, f"{field} (node {push.node})"), push.iteration)
            return
        route.is_ended = route.is_ended or push.end_of_stream
        if not route.item_run:  # an item run's are credited as they are answered
            self._credit(route, len(push.produced_us), ())

    def grant(self, item: Credit) -> bool:
        """Client room for a route's outputs; False: not a route's."""
        return self.chunks.grant(item) or self.items.grant(item)

    def opened(self, item: OpenNode) -> None:
        """A run the conductor opened: its routes, and pushes that waited for it."""
        self.out.open(item.request_id, item.node, item.iteration, item.routes)
        route = self.inb.pushing_into(item.request_id, item.node, item.iteration)
        if route is not None:
            waiting, route.waiting = route.waiting, []
            for push, tensors in waiting:
                self._push_into_run(route, push, tensors, "push")

    def _maybe_finish(self, route: InRoute) -> None:
        if route.is_finished or not route.is_drained:
            return
        route.is_finished = True
        if route.owed:  # every chunk run ended before the end of stream came: settle up
            self._credit_now(route, RouteCredit(route.request_id, route.accept.token))
        run = route.accept.run
        self._send(self.out.end(run.request_id, run.node, run.iteration))
        self.emit(route.owner, NodeDone(run.request_id, run.node, iteration=run.iteration,
                                        metadata=route.report(self.tracer, self.table.wire_id)))
        route.end_span()

    def _credit(self, route: InRoute, amount: int, consumed) -> None:
        # only the producer's own leases: ids are per arena
        leases = tuple(c.lease_id for c in consumed if c.arena in route.arenas) if consumed else ()
        run = route.accept.run  # a chain's node slows its input while its own routes are full
        key = (run.request_id, run.node, run.iteration)
        if not route.accept.push and not self.out.has_room(*key):
            self.out.defer(key, (route, RouteCredit(route.request_id, route.accept.token, amount, leases)))
        elif route.sender == LOCAL:
            self._credit_now(route, RouteCredit(route.request_id, route.accept.token, amount, leases))
        elif route.sender and not route.hold(amount, bool(leases)):  # held: nothing to build
            self.emit(route.sender, route.settle(amount, leases))

    def _credit_now(self, route: InRoute, ev: RouteCredit) -> None:
        if route.sender == LOCAL:  # a call, not a message: nothing to save by holding it
            self.sender.on_events("", [ev])
        elif route.sender:
            ev = route.coalesce(ev)
            if ev is not None:
                self.emit(route.sender, ev)

    # ---- runs ending, outputs -----------------------------------------------------

    def output_for_owner(self, request_id: str, node: str, iteration: tuple[int, ...], tensors: dict,
                         run) -> dict:
        """Feeds the routes of this output; returns what the conductor still needs."""
        if self.out.feeds(request_id, node, iteration):
            self._send(self.out.output(request_id, node, iteration, tensors))
            base = (request_id, node, iteration[:-1])
            if not self.out.has_room(*base):
                self.gate.block(base)
        return self.answered(request_id, node, iteration, tensors, run)

    def answered(self, request_id: str, node: str, iteration: tuple[int, ...], tensors: dict, run) -> dict:
        """The output's routed inputs are answered (an item run's producer is credited, a
        chunk run's route spends its client credit); returns what the conductor needs."""
        if node in self.items.nodes:
            self.items.output(request_id, node, iteration)
        quiet = run.quiet_ports if run is not None else ()
        owned = {k: v for k, v in tensors.items() if k not in quiet} if quiet else tensors
        route = self.inb.of_chunk_run((request_id, node, iteration))
        for port in owned if route is not None else ():
            if port in route.credits:
                route.credits[port] -= 1
        return owned

    def is_chunk_run(self, request_id: str, node: str, iteration: tuple[int, ...]) -> bool:
        """The run is one a granted route opened for a chunk (nothing is ever pushed into it)."""
        return self.inb.of_chunk_run((request_id, node, iteration)) is not None

    def run_done(self, ev: NodeDone, consumed) -> NodeDone | None:
        """What the conductor hears of a run's end (None: nothing, a route's chunk run)."""
        key = (ev.request_id, ev.node, ev.iteration)
        self._send(self.out.end(*key))
        found = self.inb.run_ended(key)
        if found is not None:
            route, num_new = found
            self._send(self.out.skip(*key))
            self._credit(route, num_new, consumed)
            self._maybe_finish(route)
            return None
        route = self.inb.pushing_into(*key)
        metadata = dict(ev.metadata)
        if route is not None and not route.is_finished:
            route.is_finished = True
            metadata.update(route.report(self.tracer, self.table.wire_id))
            if route.item_run:  # what it never answered, and the pushes' leases
                self.items.ended(route, consumed)
            else:
                self._credit(route, 0, consumed)  # the pushes' leases, now unreferenced
        return NodeDone(ev.request_id, ev.node, ev.consumed + consumed, ev.iteration, metadata)

    def run_failed(self, request_id: str, node: str, iteration: tuple[int, ...], message: str) -> None:
        found = self.inb.run_ended((request_id, node, iteration))
        if found is not None:
            found[0].span_error = found[0].span_error or message
        elif node in self.items.nodes:
            self.items.failed(request_id, node, iteration)

    # ---- producer half: sending, credits, peers -----------------------------------

    def _send(self, sends: list[Send]) -> None:
        for s in sends:
            if s.route.route.peer:
                self.sender.add(s)
            else:
                self._apply(LOCAL, "this process", s.push, s.tensors)

    def stream_gone(self, stream_id: str) -> None:
        """A peer stream ended: routes it fed mid-stream fail their requests."""
        for route in self.inb.sent_by(stream_id):
            if route.request_id in self.table.requests:
                run = route.accept.run
                self.fail(route.request_id, run.node, "UNAVAILABLE",
                          f"producer {route.sender_name} is unavailable: its stream to this replica broke",
                          run.iteration)
                self.drop(route.request_id)
        self.names.pop(stream_id, None)

    def repace(self, request_id: str, origin_s: float) -> None:
        self.inb.repace(request_id, origin_s)

    def cancel(self, request_id: str) -> None:
        self.out.cancel(request_id)
        self.items.cancel(request_id)
        for route in self.inb.routes.values():
            if route.request_id == request_id and not route.is_finished:
                route.end_span("cancelled")
        self.inb.cancel(request_id)

