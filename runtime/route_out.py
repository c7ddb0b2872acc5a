"""Producer side of routed streaming edges (EdgeRoute): outputs in, chunk pushes out.

A producing stream is (request, node, base iteration): the outputs of that node at
base + (k,) are its items k, from one loop run inside the component (in order) or
from one run per chunk of a routed edge into the node (possibly out of order: they
are applied in k order, a run that ends without an output skips its k). Each routed
port's items go into the route's StreamBuffer; every chunk the policy forms becomes
one PushChunk carrying the route's token, the chunk's items concatenated along dim 0
and the production time of its new items. An item of a per-item stream (FixedChunk(1))
that nothing waits before passes straight through as its own chunk (StreamBuffer.pass_one):
no buffered tuple and no Chunk are built for it.

Window: buffered items + new items pushed and not yet credited back <= route.window;
`has_room` says whether the producer may emit another item (else it is parked).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from graph.stream_buffer import StreamBuffer
from runtime.edge_stats import now_us
from runtime.items import EdgeRoute, PushChunk

StreamKey = tuple[str, str, tuple[int, ...]]  # (request, producing node, base iteration)


@dataclass
class OutRoute:
    route: EdgeRoute
    key: StreamKey  # the producing stream it belongs to
    buffer: StreamBuffer
    in_flight: int = 0  # new items pushed and not yet credited back

    @property
    def request_id(self) -> str:
        return self.key[0]

    @property
    def room(self) -> int:
        return self.route.window - self.buffer.num_buffered - self.in_flight


@dataclass
class _Stream:
    routes: list[OutRoute]
    deferred: list = field(default_factory=list)  # upstream credits held while a route is full
    next_k: int = 0
    held: dict[int, dict | None] = field(default_factory=dict)  # k -> outputs (None: none)
    is_ended: bool = False


class Send:
    """One chunk for a route's consumer: its tensor is still a tensor (the sender exports
    it); its PushChunk is made only where one is wanted (a consumer in this process)."""

    __slots__ = ("route", "tensor", "start", "num_context", "num_pad", "is_last", "produced_us")

    def __init__(self, route: OutRoute, tensor, start: int, num_context: int, num_pad: int, is_last: bool,
                 produced_us: tuple[float, ...]) -> None:
        self.route, self.tensor, self.start, self.num_context = route, tensor, start, num_context
        self.num_pad, self.is_last, self.produced_us = num_pad, is_last, produced_us

    @property
    def tensors(self) -> dict[str, Any]:
        return {} if self.tensor is None else {self.route.route.dst_port: self.tensor}

    @property
    def push(self) -> PushChunk:
        r = self.route.route
        return PushChunk(self.route.request_id, r.dst_node, r.dst_port, r.dst_iteration, {}, self.is_last,
                         self.num_context, self.num_pad, r.token, self.start, self.produced_us)


class OutboundRoutes:
    def __init__(self) -> None:
        self.streams: dict[StreamKey, _Stream] = {}
        self.by_token: dict[str, OutRoute] = {}
        # (edge, window) -> most items ever buffered + in flight (tests read it)
        self.peak_fill: dict[tuple[str, int], int] = {}

    def open(self, request_id: str, node: str, base: tuple[int, ...], routes) -> None:
        if not routes or (request_id, node, base) in self.streams:
            return
        outs = [OutRoute(r, (request_id, node, base), StreamBuffer(r.policy, max(r.window, r.policy.min_buffer),
                                                     name=f"edge {r.edge or r.dst_node} of {request_id}"))
                for r in routes]
        self.streams[(request_id, node, base)] = _Stream(outs)
        self.by_token.update({o.route.token: o for o in outs if o.route.token})

    def feeds(self, request_id: str, node: str, iteration: tuple[int, ...]) -> bool:
        return bool(iteration) and (request_id, node, iteration[:-1]) in self.streams

    def output(self, request_id: str, node: str, iteration: tuple[int, ...], tensors: dict | None) -> list[Send]:
        """An output at base + (k,) (None: run k had none): the pushes it, and the held
        later items it releases, complete."""
        stream = self.streams.get((request_id, node, iteration[:-1])) if iteration else None
        if stream is None or stream.is_ended:
            return []
        stream.held[iteration[-1]] = tensors
        sends: list[Send] = []
        while stream.next_k in stream.held:
            outputs = stream.held.pop(stream.next_k)
            stream.next_k += 1
            for out in stream.routes:
                if outputs is not None and out.route.src_port in outputs:
                    value, produced = outputs[out.route.src_port], now_us()
                    start = out.buffer.pass_one()
                    if start is not None:  # the per-item stream: the item is its chunk, none built
                        sends.append(self._dispatch(out, [value], start, 0, 0, False, (produced,)))
                    else:
                        out.buffer.push([(value, produced)])
                        sends += self._chunks(out)
                    key, fill = (out.route.edge, out.route.window), out.buffer.num_buffered + out.in_flight
                    if fill > self.peak_fill.get(key, 0):
                        self.peak_fill[key] = fill
        return sends

    def skip(self, request_id: str, node: str, iteration: tuple[int, ...]) -> list[Send]:
        """Run k ended: if it produced nothing, item k is empty and later items may go."""
        stream = self.streams.get((request_id, node, iteration[:-1])) if iteration else None
        if stream is None or iteration[-1] < stream.next_k or iteration[-1] in stream.held:
            return []
        return self.output(request_id, node, iteration, None)

    def end(self, request_id: str, node: str, base: tuple[int, ...]) -> list[Send]:
        """The producer is done: final chunks (an empty one ends an aligned stream)."""
        stream = self.streams.get((request_id, node, base))
        if stream is None or stream.is_ended:
            return []
        stream.is_ended = True
        sends = []
        for out in stream.routes:
            out.buffer.finish()
            sends += self._chunks(out)
        return sends

    def _chunks(self, out: OutRoute) -> list[Send]:
        return [self._send(out, chunk) for chunk in out.buffer.pop_ready()]

    def _send(self, out: OutRoute, chunk) -> Send:
        return self._dispatch(out, [t for t, _ in chunk.items], chunk.start, chunk.num_context, chunk.num_pad,
                              chunk.is_last, tuple(t for _, t in chunk.new_items))

    @staticmethod
    def _dispatch(out: OutRoute, tensors: list, start: int, num_context: int, num_pad: int, is_last: bool,
                  produced: tuple) -> Send:
        """One chunk's Send: its items joined along dim 0 (a copy for a consumer in this
        process), its new items (one production time each) counted in flight."""
        out.in_flight += len(produced)
        tensor = _joined(tensors, copy=not out.route.peer) if tensors else None
        return Send(out, tensor, start, num_context, num_pad, is_last, produced)

    def credit(self, token: str, amount: int) -> OutRoute | None:
        out = self.by_token.get(token)
        if out is not None:
            out.in_flight = max(0, out.in_flight - amount)
        return out

    def has_room(self, request_id: str, node: str, base: tuple[int, ...]) -> bool:
        stream = self.streams.get((request_id, node, base))
        if stream is not None:
            for out in stream.routes:  # a loop, not all(genexpr): asked twice per routed item
                if out.room <= 0:
                    return False
        return True

    def defer(self, key: StreamKey, credit) -> bool:
        """Holds an upstream credit while this stream's routes are full (a chain: the
        chunk runs feeding it cannot be parked, so their input is slowed instead)."""
        stream = self.streams.get(key)
        if stream is None or self.has_room(*key):
            return False
        stream.deferred.append(credit)
        return True

    def released(self, key: StreamKey) -> list:
        """Upstream credits to send now that the stream has room again."""
        stream = self.streams.get(key)
        if stream is None or not self.has_room(*key):
            return []
        deferred, stream.deferred = stream.deferred, []
        return deferred

    def keys_of(self, out: OutRoute) -> list[StreamKey]:
        return [out.key] if out.key in self.streams else []

    def requests_via(self, peer: str) -> set[str]:
        return {k[0] for k, s in self.streams.items() if any(o.route.peer == peer for o in s.routes)}

    def cancel(self, request_id: str) -> None:
        for key in [k for k in self.streams if k[0] == request_id]:
            for out in self.streams.pop(key).routes:
                self.by_token.pop(out.route.token, None)

    def check_integrity(self) -> None:
        """Every route's buffer and in-flight count stay within its window."""
        for key, stream in self.streams.items():
            for out in stream.routes:
                assert 0 <= out.in_flight, (key, out.in_flight)
                assert out.buffer.num_buffered <= max(out.route.window, out.route.policy.min_buffer), key


def _joined(items: list, copy: bool):
    """The chunk's items along dim 0. One item bound for a peer goes as it is (its export
    copies it); a consumer in this process always gets a tensor of its own."""
    return items[0] if len(items) == 1 and not copy else torch.cat(items)
