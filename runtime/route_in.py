"""Consumer side of routed streaming edges: which pushes a replica accepts, and where
each route stands.

The conductor grants a route with an AcceptRoute on its own stream (the route's owner:
outputs, errors and the route's end go there). Pushes carry the route's token; the first
stream that pushes with it becomes the route's sender, and no other stream may use it.
A push may arrive before its grant (they travel on different connections): it waits,
unclaimed, in a bounded holding area, and is applied once the grant arrives (a token
nobody grants only ever costs that bounded room). A batch entry names its route by id
(runtime.push_batch.route_id of the token) and carries no identity of its own: the
route's grant gives its request, node, iteration and port.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from opentelemetry.trace import Status, StatusCode

from core.errors import InvalidArgument
from core.evolve import evolve
from runtime.edge_stats import EdgeRecorder, now_us, percentile
from runtime.items import AcceptRoute, ChunkInfo, OpenNode, PushChunk, RouteCredit
from runtime.push_batch import route_id
from runtime.telemetry import extract_context

RunKey = tuple[str, str, tuple[int, ...]]
MAX_UNCLAIMED_TOKENS = 1024
MAX_UNCLAIMED_PUSHES = 4096  # per token: a producer never has more in flight than its window


class RoutePermissionDenied(InvalidArgument):
    status = "PERMISSION_DENIED"


@dataclass
class InRoute:
    accept: AcceptRoute
    owner: str  # the stream that granted it
    sender: str = ""  # the stream that pushes on it
    sender_name: str = ""
    num_opened: int = 0
    num_running: int = 0
    is_ended: bool = False  # the producer's end of stream arrived
    is_finished: bool = False  # ended, every chunk run done, statistics reported
    item_run: bool = False  # fed into one run of its node, not a run per item (runtime.route_item_runs)
    num_pending: int = 0  # an item run's items pushed and not answered yet (not credited back)
    held: deque = field(default_factory=deque)  # an item run's [items not answered, their handles] per push
    waiting: list = field(default_factory=list)  # (push, tensors) not applied yet, in order
    credits: dict[str, int] = field(default_factory=dict)  # client-bound port -> outputs it may still send
    recorder: EdgeRecorder = field(default_factory=EdgeRecorder)
    arenas: set = field(default_factory=set)  # the producer's arenas its pushes referenced
    # A per-item route's chunk runs share one `node <name>` span (one per item would cost
    # more than the item's work): started with the first, ended when the route finishes.
    span: Any = None
    span_context: Any = None  # the context that makes `span` current (made with it)
    span_error: str | None = None  # the first of its chunk runs' failures
    owed: int = 0  # items consumed and not yet credited back to a remote producer (`coalesce`)

    @property
    def request_id(self) -> str:
        return self.accept.run.request_id

    @property
    def feeds_one_run(self) -> bool:
        """Its pushes go into one open run (a loop run, or an item run), not a run each."""
        return self.accept.push or self.item_run

    @property
    def is_blocked(self) -> bool:
        """Its client is behind: no chunk run opens until the conductor grants more."""
        for c in self.credits.values():  # a loop, not any(genexpr): asked per chunk, mostly of none
            if c <= 0:
                return True
        return False

    @property
    def is_drained(self) -> bool:
        return self.is_ended and self.num_running == 0

    def coalesce(self, credit: RouteCredit) -> RouteCredit | None:
        """The credit to send now (None: held). A per-item route's credits wait until half
        its window is owed: its producer buffers nothing between pushes, so it still has
        room for half a window and never waits for them, while one credit message per engine
        step would wake the producer's process on every item it sent. A credit that frees
        leases, or comes once the stream has ended, goes at once with everything owed."""
        if self.hold(credit.amount, bool(credit.lease_ids)):
            return None
        return self.settle(credit.amount, credit.lease_ids)

    def settle(self, amount: int, lease_ids: tuple[int, ...]) -> RouteCredit:
        """The credit that pays `amount` and everything owed, with these leases."""
        amount, self.owed = self.owed + amount, 0
        return RouteCredit(self.request_id, self.accept.token, amount, lease_ids)

    def hold(self, amount: int, frees_leases: bool) -> bool:
        """True, and `amount` owed, when `coalesce` would hold such a credit (the per-item
        path asks before it builds one)."""
        if (self.accept.per_item and not frees_leases and not (self.is_ended or self.is_finished)
                and self.owed + amount < self.accept.window // 2):
            self.owed += amount
            return True
        return False

    def report(self, tracer, wire_id: Callable[[str], str]) -> dict:
        """The edge's statistics for the conductor, and its spans in the request's trace."""
        stats = summary(self)
        run = self.accept.run
        self.recorder.emit_spans(tracer, extract_context(run.traceparent, run.tracestate), wire_id(run.request_id))
        return {"edge": stats} if stats else {}

    def end_span(self, error: str | None = None) -> None:
        """Ends the shared span of a per-item route's chunk runs (once), with how many ran."""
        if self.span is None:
            return
        span, self.span, self.span_context = self.span, None, None
        span.set_attribute("starmesh.num_runs", self.num_opened)
        error = self.span_error or error
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()


class InboundRoutes:
    def __init__(self, wire_id: Callable[[str], str] = str) -> None:
        """wire_id: a request's id -> the id its stream named (runtime.request_scope): what
        a producer names a push's request by."""
        self.wire_id = wire_id
        self.routes: dict[str, InRoute] = {}
        self.by_id: dict[int, InRoute] = {}  # route_id(token) -> route
        self.unclaimed: OrderedDict[int, list] = OrderedDict()  # route id -> [(stream, name, push, tensors)]
        self.chunk_runs: dict[RunKey, tuple[InRoute, int]] = {}  # chunk run -> (route, its new items)
        self.by_run: dict[RunKey, InRoute] = {}  # (request, node, base iteration) -> its route
        # route id -> (stream, error) of a batch refused whole before the route's grant
        self.refused: OrderedDict[int, tuple[str, Exception]] = OrderedDict()

    def accept(self, owner: str, item: AcceptRoute) -> list:
        """Grants the route; returns the pushes that arrived before the grant."""
        route = self.routes[item.token] = InRoute(item, owner, credits=dict(item.run.credits))
        rid = route_id(item.token)
        self.by_id[rid] = route
        self.by_run[(item.run.request_id, item.run.node, item.run.iteration)] = route
        return [(stream, name, push if push.request_id else self.identify(route, push), tensors)
                for stream, name, push, tensors in self.unclaimed.pop(rid, [])]

    def refuse_ungranted(self, stream_id: str, rid: int, error: Exception) -> None:
        """A batch refused whole named this route before its grant reached us (the grant
        and the batch travel on different streams): the grant, when it comes, fails."""
        self.refused[rid] = (stream_id, error)
        self.refused.move_to_end(rid)
        while len(self.refused) > MAX_UNCLAIMED_TOKENS:
            self.refused.popitem(last=False)

    def refusal(self, token: str) -> tuple[str, Exception] | None:
        """(stream, error) of a batch refused before this route's grant, once."""
        return self.refused.pop(route_id(token), None)

    def identify(self, route: InRoute, push: PushChunk) -> PushChunk:
        """A batch entry's push with its route's identity (request, node, iteration, port)."""
        run = route.accept.run
        return evolve(push, request_id=run.request_id, node=run.node, iteration=run.iteration,
                      port=route.accept.port, route=route.accept.token)

    def claim(self, stream_id: str, name: str, push: PushChunk, tensors, rid: int | None = None) -> InRoute | None:
        """The route a push belongs to, or None when it waits for its grant; raises
        RoutePermissionDenied for a push that does not match its route. rid: a batch
        entry's route id (its push has no identity until the route gives it one)."""
        key = route_id(push.route) if rid is None else rid
        route = self.by_id.get(key)
        if route is None:
            self._hold(stream_id, name, push, tensors, key)
            return None
        run = route.accept.run
        if rid is None and ((push.node, push.iteration, push.port) != (run.node, run.iteration, route.accept.port)
                            or push.request_id not in (run.request_id, self.wire_id(run.request_id))):
            raise RoutePermissionDenied(f"push.route: the token is not granted for {push.node}{list(push.iteration)}"
                                        f".{push.port} of request {push.request_id!r}")
        if route.sender and route.sender != stream_id:
            raise RoutePermissionDenied("push.route: the token belongs to another stream")
        route.sender, route.sender_name = stream_id, name
        return route

    def _hold(self, stream_id: str, name: str, push: PushChunk, tensors, rid: int) -> None:
        held = self.unclaimed.setdefault(rid, [])
        if len(held) >= MAX_UNCLAIMED_PUSHES:
            raise RoutePermissionDenied("push.route: too many pushes for a token never granted")
        held.append((stream_id, name, push, tensors))
        while len(self.unclaimed) > MAX_UNCLAIMED_TOKENS:
            self.unclaimed.popitem(last=False)

    def record(self, route: InRoute, push: PushChunk, value) -> None:
        """Production -> dispatch of the push's new items (the edge's span), and the
        part of it spent in this runtime since the push arrived (received_us; 0: none)."""
        for ref in push.tensors.values():
            arena = getattr(ref.location, "arena", "")
            if arena:
                route.arenas.add(arena)
        now, edge, received = now_us(), route.accept.edge, push.received_us
        if route.accept.per_item:
            for produced in push.produced_us:
                route.recorder.hop(edge, produced, now, value, received)
        elif push.produced_us:
            stamped = [(value, push.produced_us[0])] * push.num_context + [(value, t) for t in push.produced_us]
            route.recorder.chunk(edge, stamped, push.num_context, now, received)

    def chunk_run(self, route: InRoute, push: PushChunk) -> OpenNode:
        """The run of one chunk: the grant's template at iteration + (k,)."""
        template = route.accept.run
        chunk = ChunkInfo(push.start, push.num_context, push.end_of_stream, push.num_pad)
        pace = template.pace.starting_at(chunk.first_new) if template.pace else None
        # A copy of the template's fields, as core.evolve makes it, without its keyword
        # call and name check (~0.6 us, not ~1.5, once per item of a per-item stream): the
        # template was checked when its grant was decoded, and these fields have no checks.
        item = object.__new__(OpenNode)
        state = item.__dict__
        state.update(template.__dict__)
        state.update(iteration=template.iteration + (route.num_opened,), inputs={}, chunk=chunk, pace=pace)
        route.num_opened += 1
        route.num_running += 1
        self.chunk_runs[(item.request_id, item.node, item.iteration)] = (route, len(push.produced_us))
        return item

    def run_ended(self, key: RunKey) -> tuple[InRoute, int] | None:
        """A chunk run of a route ended: (its route, the new items to credit back)."""
        found = self.chunk_runs.pop(key, None)
        if found is not None:
            found[0].num_running -= 1
        return found

    def of_chunk_run(self, key: RunKey) -> InRoute | None:
        found = self.chunk_runs.get(key)
        return found[0] if found is not None else None

    def granted(self, request_id: str, node: str, iteration: tuple[int, ...]) -> InRoute | None:
        """The chunk-mode route whose runs are `node` at `iteration` + (k,)."""
        route = self.by_run.get((request_id, node, iteration))
        return route if route is not None and not route.feeds_one_run else None

    def pushing_into(self, request_id: str, node: str, iteration: tuple[int, ...]) -> InRoute | None:
        """The route pushing into this open run (a loop run, or an item run), if any."""
        route = self.by_run.get((request_id, node, iteration))
        return route if route is not None and route.feeds_one_run else None

    def sent_by(self, stream_id: str) -> list[InRoute]:
        return [r for r in self.routes.values() if r.sender == stream_id and not r.is_finished]

    def repace(self, request_id: str, origin_s: float) -> None:
        """Chunk runs the request's routes open from now on are due relative to origin_s."""
        for route in self.routes.values():
            run = route.accept.run
            if run.request_id == request_id and run.pace is not None:
                route.accept = replace(route.accept, run=replace(run, pace=run.pace.moved(origin_s)))

    def cancel(self, request_id: str) -> None:
        self.routes = {t: r for t, r in self.routes.items() if r.request_id != request_id}
        self.by_id = {i: r for i, r in self.by_id.items() if r.request_id != request_id}
        self.by_run = {k: r for k, r in self.by_run.items() if k[0] != request_id}
        self.chunk_runs = {k: v for k, v in self.chunk_runs.items() if k[0] != request_id}
        for rid in [i for i, held in self.unclaimed.items() if held and held[0][2].request_id == request_id]:
            del self.unclaimed[rid]

    def check_integrity(self) -> None:
        """Each route's running count is its open chunk runs, only an item run has items
        pending; every index entry is live."""
        for route in self.routes.values():
            running = sum(1 for r, _ in self.chunk_runs.values() if r is route)
            assert route.num_running == running, (route.accept.token, route.num_running, running)
            assert route.num_pending >= 0 and (route.item_run or not route.num_pending), route.accept.token
            assert sum(n for n, _ in route.held) == route.num_pending, route.accept.token  # a counter of held
        assert all(r in self.routes.values() for r in self.by_run.values())
        assert len(self.by_id) == len(self.routes) and all(route_id(t) in self.by_id for t in self.routes)
        assert len(self.unclaimed) <= MAX_UNCLAIMED_TOKENS and len(self.refused) <= MAX_UNCLAIMED_TOKENS


def summary(route: InRoute) -> dict:
    """The edge's statistics as the conductor hears them at its end (metrics)."""
    stats = route.recorder.edges.get(route.accept.edge)
    if stats is not None and stats.latencies_us:
        return {"edge": route.accept.edge, **stats.attributes()}
    hops = route.recorder.chunks
    if hops:
        out = {"edge": route.accept.edge, "starmesh.items": sum(h.num_new for h in hops),
               "starmesh.latency_us.p50": percentile(sorted(h.latency_us for h in hops), 0.5)}
        waits = sorted(max(0.0, h.dispatched_us - h.received_us) for h in hops if h.received_us)
        if waits:
            out["starmesh.consumer_wait_us.p50"] = percentile(waits, 0.5)
        return out
    return {}
