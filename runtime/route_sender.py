"""The producer half's wire: one engine iteration's pushes as one PushBatch set per peer,
and what comes back from the peers (credits, refusals, a broken link).

Routed edges hand each chunk for a remote consumer to `add`; `flush` (once per engine
iteration) stacks each peer's chunks into PushBatches (runtime.push_batch: one per tensor
signature), exports each batch's rows once (inline, or one shared-memory lease with a
share per request) and posts them to the peer as one message. A RouteCredit frees room
in its route's window (the producing run resumes) and acknowledges the leases its
consumer no longer references, for its own request's share.
"""
from __future__ import annotations

from typing import Any, Callable

from core.errors import StarmeshError
from runtime.items import NodeError, RouteCredit
from runtime.push_batch import BatchBuilder


class PeerSender:
    def __init__(self, out: Any, transport: Any, peers: Any, gate: Any, fail: Callable, drop: Callable,
                 credit_now: Callable) -> None:
        """out: the runtime.route_out.OutboundRoutes; gate: the step loop's CreditGate;
        fail(request, node, status, message, iteration) and drop(request) are the step
        loop's; credit_now(route, credit): sends an upstream credit a chained producer
        held while its routes were full (the consumer half's)."""
        self.out, self.transport, self.peers, self.gate = out, transport, peers, gate
        self.fail, self.drop, self.credit_now = fail, drop, credit_now
        self._pending: dict[str, tuple[BatchBuilder, str]] = {}  # peer -> (this iteration's pushes, its host)
        self._builders: dict[str, BatchBuilder] = {}  # peer -> its builder between iterations

    def add(self, send) -> None:
        """One chunk (a runtime.route_out.Send: tensor [n, ...] or None) for this iteration's batch."""
        out, route = send.route, send.route.route
        pending = self._pending.get(route.peer)
        if pending is None:
            builder = self._builders.pop(route.peer, None) or BatchBuilder()  # empty again after its build
            pending = self._pending[route.peer] = (builder, route.peer_host_id)
        pending[0].add(route.token, out.request_id, send.start, send.num_context, send.num_pad, send.is_last,
                       send.produced_us, send.tensor)

    def flush(self) -> None:
        """One message per peer for this engine iteration's pushes: its PushBatches
        (one per tensor signature), each with one reference for all of its rows."""
        pending, self._pending = self._pending, {}
        for peer, (builder, host) in pending.items():
            if self.peers is None:
                self.on_broken(peer, "this process has no peer links")
                continue
            carrier, hosts = f"peer:{peer}", (host,) if host else ()

            def export(rows, shares, carrier=carrier, hosts=hosts):
                return self.transport.export(rows, request_id=next(iter(shares)), carrier=carrier,
                                             consumer_host_ids=hosts, shares=shares)

            try:
                batches = builder.build(export, own_rows=getattr(self.peers, "carries_tensors", False))
            except StarmeshError as e:  # no room to export the step's rows: its requests fail
                for request_id in sorted(builder.request_ids):
                    self.fail_via(request_id, peer, f"{e.status}: {e}")
                continue
            self.peers.post(peer, batches)
            self._builders[peer] = builder

    def on_events(self, peer: str, events: list) -> None:
        for ev in events:
            if isinstance(ev, RouteCredit):
                out = self.out.credit(ev.token, ev.amount)
                if ev.lease_ids:  # the route's own request's share, whatever id the consumer knows it by
                    owner = out.request_id if out is not None else ev.request_id
                    self.transport.release(list(ev.lease_ids), request_id=owner or None)
                for key in self.out.keys_of(out) if out is not None else ():
                    if self.out.has_room(*key):
                        self.gate.unblock(key)
                    for route, credit in self.out.released(key):
                        self.credit_now(route, credit)
            elif isinstance(ev, NodeError) and ev.request_id:  # the consumer refused a push
                self.fail_via(ev.request_id, peer, f"{ev.status}: {ev.message}")

    def on_broken(self, peer: str, message: str) -> None:
        for request_id in sorted(self.out.requests_via(peer)):
            self.fail_via(request_id, peer, message)

    def fail_via(self, request_id: str, peer: str, message: str) -> None:
        for rid, node, base in [k for k in self.out.streams if k[0] == request_id]:
            self.fail(rid, node, "UNAVAILABLE", f"peer {peer} is unavailable: {message}", base)
        self.drop(request_id)
