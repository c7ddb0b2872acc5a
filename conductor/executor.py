"""The walk executor: Algorithm 1 over targets (in-process components or replicas).

The loop reads as ready -> dispatch -> collect: events from targets update the
request's WalkState (collect), whose ready() node runs are sent as one message per
target (dispatch). Requests share each target's stream; a failing run fails only
its request; a finished or cancelled request is cancelled on every target it
reached, which frees its component state, buffers and leases there.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, AsyncIterator, Mapping

from opentelemetry import trace

from conductor.chunk_override import first_chunk_param
from conductor.executor_hooks import Connect, ExecutorHooks
from conductor.liveness import DEFAULT_SILENCE_S, Liveness
from conductor.request_run import END, Failure, RequestRun
from conductor.route_plan import plan_routes
from conductor.send_rounds import SendRounds
from conductor.targets import broken_reason, run_item
from conductor.walk_scope import WalkScope
from conductor.walk_state import WalkState
from core.errors import InvalidArgument, StarmeshError
from core.pace import NodePace
from graph.validate import validate_inner_loops
from graph.walk import WalkGraph
from runtime.items import LOCKSTEP_PAD, Alive, Cancel, Credit, NodeDone, NodeError, NodeOutput, OutboundEvent, Repace
from runtime.received_rows import ReceivedRows, RowsView
from runtime.telemetry import inject_context

log = logging.getLogger(__name__)


class RequestFailed(StarmeshError):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class Executor:
    def __init__(self, graph: WalkGraph, connect: Connect, inner_loops=frozenset(),
                 tracer: trace.Tracer | None = None, speculate: bool = True, max_backlog: int = 256,
                 run_timeout_s: float = 10.0, pacing: Mapping[str, NodePace] | None = None,
                 linger_s: float = 0.0, silence_s: float = DEFAULT_SILENCE_S) -> None:
        """connect(self.on_events) builds the targets and returns the hooks over them;
        inner_loops: names of the loops that run inside their component; max_backlog:
        outputs held for a client that does not read; run_timeout_s: a request that a
        replica's heartbeats stop listing for this long fails (check_liveness); pacing:
        node -> NodePace, how the model's nodes' items map to media time (core.pace);
        linger_s: how long the clean-up of a finished request may wait to ride with a later
        message to its targets (conductor.send_rounds; 0: sent at once); silence_s: a replica
        that sends nothing on its stream this long while it holds requests is hung
        (check_liveness, conductor.liveness)."""
        if isinstance(max_backlog, bool) or not isinstance(max_backlog, int) or max_backlog < 1:
            raise InvalidArgument(f"executor max_backlog must be an integer >= 1, got {max_backlog!r}")
        self.liveness = Liveness(run_timeout_s, silence_s)
        self.run_timeout_s = run_timeout_s
        self.pacing = dict(pacing or {})
        validate_inner_loops(graph, inner_loops)
        self.graph = graph
        self.num_dispatched: dict[str, int] = {}  # node -> node runs and pushes sent, over all requests
        self.num_wasted = 0  # speculative runs discarded at a stop, over all requests
        self.max_backlog = max_backlog
        self.rounds = SendRounds(linger_s)  # one message per target per round
        self.requests: dict[str, RequestRun] = {}
        self.tracer = tracer or trace.get_tracer("starmesh.conductor")
        self.hooks: ExecutorHooks = connect(self.on_events)  # the targets may deliver from here on
        speculative = frozenset(n.name for n in graph.nodes if n.speculative and speculate)
        self.scopes = {w.name: WalkScope(w, frozenset(inner_loops), speculative, self.hooks.can_route)
                       for w in graph.walks}

    # ---- front: one request -------------------------------------------------------

    async def generate(self, request_id: str, inputs: dict[str, tuple], params=None,
                       wanted: frozenset[str] = frozenset(), playback=None,
                       silent: frozenset[str] = frozenset()) -> AsyncIterator[tuple[str, Any]]:
        """generate_batches, one (output name, value) at a time."""
        async with contextlib.aclosing(self.generate_batches(request_id, inputs, params, wanted, playback,
                                                             silent)) as batches:
            async for batch in batches:
                for name, value in batch:
                    if isinstance(value, RowsView):  # several outputs of one name: each its own value here
                        for ref in value.refs():
                            yield name, ref
                    else:
                        yield name, value

    async def generate_batches(self, request_id: str, inputs: dict[str, tuple], params=None,
                               wanted: frozenset[str] = frozenset(), playback=None,
                               silent: frozenset[str] = frozenset(), contexts: tuple = (),
                               report: dict | None = None) -> AsyncIterator[list[tuple[str, Any]]]:
        """Runs a request through its walks; yields lists of (output name, value) as
        produced: everything that arrived together (never an empty list); a value may be
        a runtime.received_rows.RowsView, several outputs of that name (`generate`
        yields each of them).
        `wanted`: the output kinds it asks for (graph.walk.FirstWalk; empty: all);
        playback: a media stream's conductor.playback.Playback: its origin_s is when media
        position 0 plays (core.pace; `repace` moves it), its attributes() end on the
        request span; None: no deadline (then `pacing` is unused). silent: names of walk
        outputs the client does not take (they are never sent to it, and a service keeps a
        port to itself when only those and routed edges read it); honoured only in a graph
        whose requests end with their first walk (a later walk may read any output).
        contexts: the kept KV contexts its runs read or leave (core.context_use.ContextUse,
        sent on every run it opens); report: filled with what its nodes report about them
        (RequestRun.note) while it runs."""
        if request_id in self.requests:
            raise RequestFailed("ALREADY_EXISTS", f"request_id {request_id!r} is already running")
        first_chunk_param(dict(params or {}))  # a bad per-request chunk override fails before any work
        run = RequestRun(request_id, dict(inputs), dict(params or {}), "", None, max_backlog=self.max_backlog,
                         pacing=self.pacing, origin_s=playback.origin_s if playback is not None else None,
                         silent=silent if self.graph.ends_after_first_walk else frozenset(),
                         contexts=tuple(contexts), report=report if report is not None else {})
        self.requests[request_id] = run
        run.spans.append(self.tracer.start_span("request", attributes={"starmesh.request_id": request_id}))
        try:
            self._enter_walk(run, self.graph.start(run.inputs, wanted), run.inputs)
            self._pump(run)
            self._flush()
            while True:
                batch, last = await run.queue.take()
                if batch:
                    yield batch
                if last is END:
                    return
                if isinstance(last, Failure):
                    raise RequestFailed(last.status, last.message)
                if run.state is not None and run.state.credits.is_waiting_room:
                    run.state.is_dirty = True  # the client took some: a waiting run may start
                self._pump(run)  # ... and producers may get credit again
                self._flush()
        finally:
            if not run.is_finished:
                self._finish(run, "cancelled")
                self._flush()
            self.requests.pop(request_id, None)
            if playback is not None:
                run.spans[0].set_attributes(playback.attributes())
            for span in reversed(run.spans):
                span.end()

    def repace(self, request_id: str, origin_s: float) -> None:
        """The request's playback origin moved: runs opened from now on carry it, and every
        service it reached re-times what it holds (one small message per service)."""
        run = self.requests.get(request_id)
        if run is None or run.is_finished or run.origin_s is None:
            return
        run.origin_s = origin_s
        for target in run.reached.values():
            self._send(target, Repace(request_id, origin_s))
        self._flush()

    def _end_walk_span(self, run: RequestRun) -> None:
        if len(run.spans) > 1:
            span = run.spans.pop()
            if run.state is not None:
                for edge, seconds in run.state.timer.recorder.latencies_s():
                    self.hooks.on_edge(edge, seconds)
                run.state.timer.recorder.emit_spans(self.tracer, trace.set_span_in_context(span), run.request_id)
            span.end()

    def _enter_walk(self, run: RequestRun, walk: str, inputs: dict[str, tuple]) -> None:
        self._end_walk_span(run)
        if run.state is not None:
            self.num_wasted += run.state.num_wasted
        ctx = trace.set_span_in_context(run.spans[0])
        run.spans.append(self.tracer.start_span(f"walk {walk}", context=ctx,
                                                attributes={"starmesh.request_id": run.request_id}))
        missing = [name for name in self.scopes[walk].walk.input_names if name not in inputs]
        if missing:
            raise RequestFailed("INVALID_ARGUMENT", f"walk {walk} needs input(s) {missing}; got {sorted(inputs)}")
        run.walk = walk
        run.traceparent, _ = inject_context(trace.set_span_in_context(run.spans[-1]))  # the walk span's
        run.state = WalkState(self.scopes[walk], inputs, run.client_room, run.params, self.hooks.materialize,
                              run.silent, keep_outputs=not self.graph.ends_after_first_walk)

    # ---- ready -> dispatch ---------------------------------------------------------

    def _send(self, target, item) -> None:
        """Queues an item; `_flush` sends each target's items of this round as ONE
        message, whatever requests they belong to (one engine step, one message)."""
        self.rounds.send(target, item)

    def _flush(self) -> None:
        self.rounds.flush()

    def send_now(self, targets, item) -> None:
        """An item outside any request (runtime.items.ContextOp) to each of `targets`, at
        once; on each target's stream it goes after what was sent there before."""
        for target in targets:
            self._send(target, item)
        self._flush()

    def close(self) -> None:
        """Sends what still lingers (the clean-up of finished requests)."""
        self.rounds.flush_all()

    def _pump(self, run: RequestRun) -> None:
        while not run.is_finished:
            opened = []  # (node, target) of the new node runs of this pump
            for d in run.state.ready():
                target = self._dispatch(run, d)
                if not d.push:
                    opened.append((d.node, target))
            self._pad_lockstep(run, opened)
            for node, tag, port, amount in run.state.credits.replenish():
                self._send(run.targets[(node, tag)], Credit(run.request_id, node, port, amount, tag))
            if not run.state.is_complete:
                return
            self._next_walk(run)

    def _dispatch(self, run: RequestRun, d):
        """Sends one dispatch (and the route grants of a run feeding routed edges)."""
        scope = run.state.scope
        target = run.targets.get((d.node, d.iteration)) if d.node in scope.routed_push else None
        target = target or self.hooks.route(d.node, run.walk, run.request_id)
        run.reach(target, time.monotonic())
        if d.credits or d.node in scope.inner:
            run.targets[(d.node, d.iteration)] = target
        routes = ()
        if not d.push and scope.routed_out.get(d.node):
            routes, grants = plan_routes(run, scope, d.node, d.iteration, target, self.hooks, run.traceparent)
            for consumer, grant in grants:
                self._send(consumer, grant)
        self.num_dispatched[d.node] = self.num_dispatched.get(d.node, 0) + 1
        self._send(target, run_item(run.request_id, run.walk, d, run.params, target.convert, run.traceparent, scope,
                                    self.hooks.consumer_hosts(d.node, run.walk), routes, run.pace_of(d.node),
                                    quiet=scope.quiet_for(d.node, run.silent) if run.silent else None,
                                    contexts=run.contexts))
        return target

    def _pad_lockstep(self, run: RequestRun, opened: list) -> None:
        """Padding units for the ranks of a lockstep group this pump gave fewer units
        (conductor.lockstep), sent in the same flush as the others'."""
        lockstep = self.hooks.lockstep
        if lockstep is None:
            return
        for target, num_pads in lockstep.pads(opened):
            run.reach(target, time.monotonic())  # its Cancel at the end frees the pads' state there
            for _ in range(num_pads):
                self._send(target, lockstep.pad_item(run.request_id, run.walk))

    def _next_walk(self, run: RequestRun) -> None:
        outputs = run.state.outputs
        following = self.graph.after(run.inputs, run.walk, outputs)
        if following is None:
            self._finish(run, "done")
            run.queue.end(END)
            return
        inputs = {**run.inputs, **{name: tuple(values) for name, values in outputs.items()}}
        try:
            self._enter_walk(run, following, inputs)
        except RequestFailed as e:
            self._fail(run, e.status, str(e))

    # ---- collect --------------------------------------------------------------------

    def on_events(self, events: list[OutboundEvent], target=None) -> None:
        """A target's batch (one engine step); an empty batch from a broken target
        fails every request that reached it."""
        if not events and target is not None and getattr(target, "broken", None) is not None:
            for run in [r for r in self.requests.values() if target.name in r.reached]:
                self._fail(run, "UNAVAILABLE", f"service {target.name} is unavailable: {broken_reason(target.broken)}")
            self._flush()
            return
        if events and getattr(target, "heartbeats", False):  # stamped as read (conductor.liveness)
            self.liveness.heard_from(target.name, time.monotonic())
        touched = {}
        for ev in events:
            if isinstance(ev, Alive):
                self._alive(ev, target)
                continue
            if isinstance(ev, ReceivedRows):
                self._collect_rows(ev, target, touched)
                continue
            run = self.requests.get(ev.request_id)
            if run is None or run.is_finished:
                continue  # cancelled meanwhile: late events are dropped
            touched[run.request_id] = run
            try:
                self._collect(run, ev, target)
                if run.state is not None:
                    run.queue.extend(run.state.take_emitted())
            except Exception as e:  # a bad event fails its request, never the executor
                log.exception("collecting %s", ev)
                self._fail(run, getattr(e, "status", "INTERNAL"), f"node {ev.node}: {e}")
        for run in touched.values():
            try:
                self._pump(run)
            except StarmeshError as e:  # e.g. no serving replica for its next node
                self._fail(run, e.status, str(e))
        self._flush()

    def _collect_rows(self, rows: ReceivedRows, target, touched: dict) -> None:
        """A batch of one node's outputs, request by request: forwarded as rows where
        the node's outputs only go to the client (WalkState.on_rows), else entry by entry."""
        for request_id, entries in rows.by_request().items():
            run = self.requests.get(request_id)
            if run is None or run.is_finished:
                continue  # cancelled meanwhile: late events are dropped
            touched[request_id] = run
            try:
                if not run.state.on_rows(rows, entries):
                    for i in entries:
                        self._collect(run, rows.output(i), target)
                run.queue.extend(run.state.take_emitted())
            except Exception as e:  # a bad event fails its request, never the executor
                log.exception("collecting %s outputs of %s", rows.node, request_id)
                self._fail(run, getattr(e, "status", "INTERNAL"), f"node {rows.node}: {e}")

    def _alive(self, ev: Alive, target) -> None:
        now = time.monotonic()
        for request_id in ev.request_ids:
            run = self.requests.get(request_id)
            if run is not None and target is not None and target.name in run.seen:
                run.seen[target.name] = now

    def check_liveness(self, now: float | None = None) -> int:
        """Fails every request on a replica that went silent (nothing on its stream for
        silence_s while it held requests: hung; the hooks' on_silent marks it down and its
        stream is given up), then every request a replica it was sent to has not listed
        for run_timeout_s (dropped there); returns how many failed. The conductor calls it
        every `liveness.interval_s`; without `now`, a stall of this event loop since the
        last call is forgiven first (conductor.liveness)."""
        runs = [run for run in self.requests.values() if not run.is_finished]
        if now is None:
            now = time.monotonic()
            self.liveness.forgive_stall(runs, now)
        failed, silent = 0, self.liveness.silent(runs, now)
        for name, (target, quiet_s) in silent.items():
            reason = (f"service {name} stopped answering: nothing on its stream for {quiet_s:.1f} s "
                      f"while it held requests (no heartbeat)")
            for run in [r for r in runs if name in r.reached and not r.is_finished]:
                failed += 1
                self._fail(run, "UNAVAILABLE", reason)
            self.hooks.on_silent(name, reason)
        self._flush()  # their Cancels go out on the old streams first: a replica that wakes frees them
        for target, _ in silent.values():
            abandon = getattr(target, "abandon", None)
            if abandon is not None:
                abandon("it stopped answering")  # the next request opens a new stream: the replica may be back
        for run, name in self.liveness.stale([r for r in runs if not r.is_finished], now):
            failed += 1
            self._fail(run, "UNAVAILABLE", f"service {name} stopped reporting request {run.request_id} "
                                           f"(no heartbeat listed it for {self.run_timeout_s:g} s)")
        self._flush()
        return failed

    def _collect(self, run: RequestRun, ev: OutboundEvent, target=None) -> None:
        if ev.node == LOCKSTEP_PAD:  # not a graph node: only its failure matters (the group is down)
            if isinstance(ev, NodeError):
                self._fail(run, ev.status, f"lockstep padding: {ev.message}")
            return
        if isinstance(ev, NodeOutput):
            if ev.metadata:
                run.note(ev.node, ev.metadata, target)
            run.state.on_output(ev.node, ev.iteration, ev.tensors, ev.produced_us or None)
        elif isinstance(ev, NodeDone):
            edge = ev.metadata.get("edge") if ev.metadata else None
            if edge:  # a routed edge ended: its statistics (the consumer emitted its spans)
                self.hooks.on_edge(edge["edge"], edge.get("starmesh.latency_us.p50", 0.0) / 1e6)
            run.state.on_done(ev.node, ev.iteration)
        elif isinstance(ev, NodeError):
            self._fail(run, ev.status, f"node {ev.node}: {ev.message}")

    def _fail(self, run: RequestRun, status: str, message: str) -> None:
        if run.is_finished:
            return
        run.spans[0].set_status(trace.Status(trace.StatusCode.ERROR, message))
        self._finish(run, "failed")
        run.queue.end(Failure(status, message))

    def _finish(self, run: RequestRun, reason: str) -> None:
        """Drops the request everywhere it ran: state, buffers and leases are freed there."""
        self._end_walk_span(run)
        if run.state is not None:
            self.num_wasted += run.state.num_wasted
        run.state = None
        for target in run.reached.values():
            if reason == "done":  # nothing runs there any more: its clean-up may ride with a later message
                self.rounds.linger(target, Cancel(run.request_id, reason))
            else:  # work may still be running there: stop it now
                self._send(target, Cancel(run.request_id, reason))
