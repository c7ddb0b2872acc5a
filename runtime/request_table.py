"""Per-request bookkeeping of the engine thread: which stream carries a request,
which resolved inputs a node run still holds, and its `node <name>` spans.

Only the step loop's engine thread touches a RequestTable, so it has no locks.
A request stays known until Cancel or the end of its stream (the component may
keep state such as KV blocks between node runs); a node run ends at its
NodeDone or NodeError, which closes its resolved inputs and its spans.

Request ids are scoped to the stream that opened them (`scoped`, runtime.request_scope):
the table, the component and the transport see local ids, the streams the ids they named.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from runtime.items import AcceptRoute, Cancel, ConsumedLease, Credit, NodeError, OpenNode, PushChunk, Release, Repace
from runtime.request_scope import RequestScopes
from runtime.telemetry import extract_context

log = logging.getLogger(__name__)
RunKey = tuple[str, str, tuple[int, ...]]
_NAMING = (OpenNode, AcceptRoute, Cancel, Release, Credit, Repace, PushChunk)  # items that name a request
_OPENING = (OpenNode, AcceptRoute)


@dataclass
class RequestState:
    stream_id: str
    consumer_host_ids: tuple[str, ...]  # the last opened run's (NodeRun): for outputs of no open run
    ended: set = field(default_factory=set)  # (node, iteration) of its runs that have ended
    client_ports: tuple[str, ...] = ()


@dataclass(slots=True)
class NodeRun:
    """One open (request, node, iteration): resolved input handles it holds and its spans.
    One per run, and a routed FixedChunk(1) stream opens a run per item: slotted."""

    handles: list[Any] = field(default_factory=list)  # transport Resolved objects
    spans: list[trace.Span] = field(default_factory=list)
    credits: dict[str, int] = field(default_factory=dict)  # output port -> items it may still emit
    is_parked: bool = False
    is_blocked: bool = False  # its routed edge's window is full
    consumer_host_ids: tuple[str, ...] = ()  # hosts of the services its outputs go to (transport choice)
    client_ports: tuple[str, ...] = ()  # outputs the conductor or its client reads: inline
    quiet_ports: tuple[str, ...] = ()  # outputs only routes consume: not sent to the stream

    @property
    def has_credit(self) -> bool:
        return all(c > 0 for c in self.credits.values())

    def close(self, error: str | None = None) -> tuple[ConsumedLease, ...]:
        """Closes every handle and span; returns the leases of other arenas consumed."""
        consumed = []
        for h in self.handles:
            c = getattr(h, "consumed", None)
            if c is not None:
                consumed.append(ConsumedLease(c.arena, c.lease_id))
            try:
                h.close()
            except Exception:  # a failing close must not keep the others open
                log.exception("closing a resolved input failed")
        self.handles.clear()
        for span in self.spans:
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
            span.end()
        self.spans.clear()
        return tuple(consumed)


class RequestTable:
    def __init__(self, tracer: trace.Tracer, max_requests: int = 1024) -> None:
        if isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 1:
            raise ValueError(f"max_requests must be an integer >= 1, got {max_requests!r}")
        self._tracer = tracer
        self.max_requests = max_requests
        self.requests: dict[str, RequestState] = {}
        self.runs: dict[RunKey, NodeRun] = {}  # (request_id, node, iteration)
        self.streams: dict[str, set[str]] = {}  # stream id -> request ids it carries
        self.scopes = RequestScopes()

    def scoped(self, stream_id: str, item: Any) -> Any:
        """`item` naming the request it means on `stream_id` (runtime.request_scope): an
        opening item for an id another stream holds gets a request of its own; a later
        item names that one. Routed pushes keep theirs: their token names the request."""
        if not isinstance(item, _NAMING) or (isinstance(item, PushChunk) and item.route):
            return item
        run = item.run if isinstance(item, AcceptRoute) else item
        local = self.scopes.local(stream_id, run.request_id)
        if local is None:
            state = self.requests.get(run.request_id)
            if state is None or not isinstance(item, _OPENING) or (
                    state.stream_id == stream_id and not self.scopes.is_local(run.request_id)):
                return item  # its own request, a new one, or another's (refused by `refusal`)
            local = self.scopes.make(stream_id, run.request_id, self.requests.__contains__)
        if isinstance(item, AcceptRoute):
            return replace(item, run=replace(run, request_id=local))
        return replace(item, request_id=local)

    def wire_id(self, request_id: str) -> str:
        """The id the request's stream named (what spans and heartbeats show)."""
        return self.scopes.wire_id(request_id)

    def add_stream(self, stream_id: str) -> None:
        self.streams.setdefault(stream_id, set())

    def owner(self, request_id: str) -> str | None:
        state = self.requests.get(request_id)
        return state.stream_id if state else None

    def is_foreign(self, stream_id: str, request_id: str) -> bool:
        """The request is open here, on another stream: items on `stream_id` must not
        touch it (a stream acts only on what it opened or was granted)."""
        owner = self.owner(request_id)
        return owner is not None and owner != stream_id

    def refusal(self, stream_id: str, field: str, item: Any, is_draining: bool = False) -> NodeError | None:
        """Why an item on `stream_id` must not be applied, or None. Ownership: a stream
        acts only on requests it opened or was granted (an OpenNode, Cancel, Release,
        Credit or grant for another stream's request is PERMISSION_DENIED); a Release
        names its request; a new request past max_requests, or any OpenNode while the
        service drains, is refused."""
        if not isinstance(item, (OpenNode, Cancel, Release, Credit, AcceptRoute, Repace)):
            return None
        refused = self._refusal(stream_id, field, item, is_draining)
        if refused is not None:
            local = refused.request_id
            wire = self.scopes.wire_for(stream_id, local)
            if wire != local:  # the stream hears of the id it named
                refused = replace(refused, request_id=wire)
                if local not in self.requests:  # made for this item, which opens nothing
                    self.scopes.forget(local)
        return refused

    def _refusal(self, stream_id: str, field: str, item: Any, is_draining: bool) -> NodeError | None:
        run = item.run if isinstance(item, AcceptRoute) else item
        rid, node = run.request_id, getattr(run, "node", "")
        kind = type(item).__name__.lower()
        iteration = tuple(getattr(run, "iteration", ()))
        if isinstance(item, Release) and not rid:
            return NodeError("", "", "INVALID_ARGUMENT", f"{field}.release.request_id is empty: a release names "
                                                         "the request whose leases it acknowledges")
        if self.is_foreign(stream_id, rid):
            return NodeError(rid, node, "PERMISSION_DENIED", f"{field}.{kind}: request {rid!r} is not open on "
                                                            "this stream", iteration)
        if isinstance(item, OpenNode) and is_draining:
            return NodeError(rid, node, "UNAVAILABLE", f"{field}.open: the service is shutting down", iteration)
        if isinstance(item, (OpenNode, AcceptRoute)) and rid not in self.requests and \
                len(self.requests) >= self.max_requests:
            return NodeError(rid, node, "RESOURCE_EXHAUSTED", f"{field}.{kind}: this replica holds "
                                                             f"{len(self.requests)} requests (max_requests)", iteration)
        return None

    def open_run(self, stream_id: str, item: OpenNode, span: trace.Span | None = None) -> tuple[NodeRun, trace.Span]:
        """Registers the request on its stream and starts its `node <name>` span (ended
        with the run); `span`: one the caller owns and ends instead (the one span of all
        the chunk runs of a per-item route)."""
        known = self.requests.get(item.request_id)
        if known is None or known.stream_id != stream_id or known.consumer_host_ids != item.consumer_host_ids \
                or known.client_ports != item.client_ports:
            self.requests[item.request_id] = RequestState(stream_id, item.consumer_host_ids,
                                                          known.ended if known is not None else set(),
                                                          item.client_ports)
            self.streams.setdefault(stream_id, set()).add(item.request_id)
        key = (item.request_id, item.node, item.iteration)
        run = self.runs.get(key)
        if run is None:  # not setdefault: that builds a spare NodeRun per call
            run = self.runs[key] = NodeRun()
        run.credits.update(item.credits)
        run.consumer_host_ids = item.consumer_host_ids
        run.client_ports = item.client_ports
        run.quiet_ports = item.quiet_ports
        if span is None:
            span = self.node_span(item)
            run.spans.append(span)
        return run, span

    def node_span(self, item: OpenNode) -> trace.Span:
        """A `node <name>` span whose parent is the request's remote span (the OpenNode's
        traceparent)."""
        return self._tracer.start_span(
            f"node {item.node}",
            context=extract_context(item.traceparent, item.tracestate),
            attributes={
                "starmesh.request_id": self.scopes.wire_id(item.request_id),
                "starmesh.walk": item.walk,
                "starmesh.node": item.node,
                "starmesh.iteration": list(item.iteration),
                "starmesh.num_inputs": len(item.inputs),
            },
        )

    def adopt(self, stream_id: str, request_id: str, consumer_host_ids: tuple[str, ...] = (),
              client_ports: tuple[str, ...] = ()) -> None:
        """Registers a request on its stream before any run (a route's grant)."""
        if request_id not in self.requests:
            self.requests[request_id] = RequestState(stream_id, consumer_host_ids, client_ports=client_ports)
            self.streams.setdefault(stream_id, set()).add(request_id)

    def run_of(self, request_id: str, node: str, iteration: tuple[int, ...]) -> tuple[RunKey, NodeRun] | None:
        """The open run an output belongs to: its own iteration, or the loop run it
        iterates (a loop inside a component tags outputs with iteration + (k,))."""
        for key in ((request_id, node, iteration), (request_id, node, iteration[:-1])):
            run = self.runs.get(key)
            if run is not None:
                return key, run
        return None

    def end_run(self, request_id: str, node: str, iteration: tuple[int, ...] = (),
                error: str | None = None, remember: bool = True) -> tuple[ConsumedLease, ...]:
        """remember: has_ended answers for it later (False for a routed edge's chunk runs:
        nothing is ever pushed into them, and a stream opens one per chunk)."""
        run = self.runs.pop((request_id, node, iteration), None)
        state = self.requests.get(request_id)
        if state is not None and remember:
            state.ended.add((node, iteration))
        return run.close(error) if run else ()

    def has_ended(self, request_id: str, node: str, iteration: tuple[int, ...]) -> bool:
        """The run ended on its own (a talker at codec EOS) while its request goes on."""
        state = self.requests.get(request_id)
        return state is not None and (node, iteration) in state.ended

    def drop_request(self, request_id: str, reason: str) -> None:
        """Forgets a request: ends its node runs (spans marked with `reason`)."""
        for key in [k for k in self.runs if k[0] == request_id]:
            self.runs.pop(key).close(reason)
        state = self.requests.pop(request_id, None)
        if state is not None:
            self.streams.get(state.stream_id, set()).discard(request_id)
        self.scopes.forget(request_id)

    def drop_stream(self, stream_id: str) -> list[str]:
        """Forgets a stream; returns the requests it carried (already dropped)."""
        request_ids = sorted(self.streams.pop(stream_id, set()))
        for rid in request_ids:
            self.drop_request(rid, "stream ended")
        return request_ids

    def has_runs(self, stream_id: str) -> bool:
        carried = self.streams.get(stream_id, set())
        return any(key[0] in carried for key in self.runs)

