"""Per-edge latency of one request: production of an item -> its consumer's dispatch.

Of that latency, the consumer's runtime also records its own share where a push crossed
processes: from the push's arrival (its message read off the stream) to dispatch, i.e.
decoding, the engine thread's queue, and the items dispatched ahead of it in the same
message (`consumer_wait`). The rest is the producer's runtime and the wire: an edge whose
wait dominates has a busy consumer; one whose rest dominates, a busy producer or link.

Tracing must stay cheap: an edge that fires per item (plain edges,
FixedChunk(1) streams) gets ONE span per (request, edge) carrying the count, bytes
and latency percentiles; an edge with larger chunks gets one span per chunk.
A per-item edge keeps its exact count, bytes and maximum, and a sample of its latencies
for the percentiles: every item while there are few, then an evenly spaced sample of at
most SAMPLE_CAP (past it, every other sample is dropped and the stride doubles), so a
long stream's statistics cost bounded memory and no list grows per item.
Timestamps are wall-clock microseconds (producers on the same host share the clock;
across hosts the figures include clock offset).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field


def now_us() -> float:
    return time.time() * 1e6


def nbytes_of(value) -> int:
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if nbytes is not None else 0


def transport_of(value) -> str:
    return getattr(value, "kind", "inproc")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


SAMPLE_CAP = 512  # latencies kept per (request, edge)


@dataclass
class EdgeStats:
    """Aggregated hops of one (request, edge): exact count, bytes and maximum; sampled
    latencies (every `stride`-th item) for the percentiles."""

    latencies_us: list[float] = field(default_factory=list)  # the sample
    waits_us: list[float] = field(default_factory=list)  # arrival -> dispatch, sampled items that crossed processes
    num_items: int = 0
    max_latency_us: float = 0.0
    stride: int = 1
    num_bytes: int = 0
    transport: str = ""
    first_us: float = 0.0
    last_us: float = 0.0

    def add(self, produced_us: float, dispatched_us: float, value, received_us: float = 0.0) -> None:
        """received_us: when the item reached the consumer's runtime (0: handed over in-process)."""
        if not self.num_items:
            self.first_us = produced_us
        latency = max(0.0, dispatched_us - produced_us)
        self.max_latency_us = max(self.max_latency_us, latency)
        if self.num_items % self.stride == 0:
            self.latencies_us.append(latency)
            if received_us:
                self.waits_us.append(max(0.0, dispatched_us - received_us))
            if len(self.latencies_us) > SAMPLE_CAP:  # thin evenly: every other sample, half as often from now
                del self.latencies_us[1::2], self.waits_us[1::2]
                self.stride *= 2
        self.num_items += 1
        self.last_us = dispatched_us
        self.num_bytes += nbytes_of(value)
        self.transport = transport_of(value)

    def attributes(self) -> dict:
        lat = sorted(self.latencies_us)
        out = {
            "starmesh.items": self.num_items,
            "starmesh.bytes": self.num_bytes,
            "starmesh.transport": self.transport,
            "starmesh.latency_us.p50": percentile(lat, 0.5),
            "starmesh.latency_us.p90": percentile(lat, 0.9),
            "starmesh.latency_us.p99": percentile(lat, 0.99),
            "starmesh.latency_us.max": self.max_latency_us,
        }
        if self.waits_us:
            waits = sorted(self.waits_us)
            out.update({"starmesh.consumer_wait_us.p50": percentile(waits, 0.5),
                        "starmesh.consumer_wait_us.p90": percentile(waits, 0.9),
                        "starmesh.consumer_wait_us.p99": percentile(waits, 0.99)})
        return out


@dataclass(frozen=True)
class ChunkHop:
    """One chunk of a chunked streaming edge: its own span."""

    edge: str
    produced_us: float  # when its last new item was produced
    dispatched_us: float
    num_new: int
    num_context: int
    num_bytes: int
    transport: str
    received_us: float = 0.0  # when the chunk reached the consumer's runtime (0: in-process)

    @property
    def latency_us(self) -> float:
        return max(0.0, self.dispatched_us - self.produced_us)


class EdgeRecorder:
    def __init__(self) -> None:
        self.edges: dict[str, EdgeStats] = {}
        self.chunks: list[ChunkHop] = []

    def hop(self, edge: str, produced_us: float, dispatched_us: float, value, received_us: float = 0.0) -> None:
        stats = self.edges.get(edge)
        if stats is None:  # not setdefault: that builds a spare EdgeStats per item
            stats = self.edges[edge] = EdgeStats()
        stats.add(produced_us, dispatched_us, value, received_us)

    def chunk(self, edge: str, stamped_items, num_context: int, dispatched_us: float,
              received_us: float = 0.0) -> None:
        new = stamped_items[num_context:]
        produced = max((t for _, t in new), default=dispatched_us)
        self.chunks.append(ChunkHop(edge, produced, dispatched_us, len(new), num_context,
                                    sum(nbytes_of(v) for v, _ in stamped_items),
                                    transport_of(stamped_items[0][0]) if stamped_items else "", received_us))

    def latencies_s(self):
        """(edge, seconds) of every chunk and every sampled hop recorded so far (metrics)."""
        for name, stats in self.edges.items():
            for us in stats.latencies_us:
                yield name, us / 1e6
        for hop in self.chunks:
            yield hop.edge, hop.latency_us / 1e6

    def emit_spans(self, tracer, parent_context, request_id: str) -> None:
        """One span per aggregated edge and per chunk, with explicit timestamps."""
        for name, stats in self.edges.items():
            span = tracer.start_span(f"edge {name}", context=parent_context, start_time=int(stats.first_us * 1e3),
                                     attributes={"starmesh.request_id": request_id, **stats.attributes()})
            span.end(end_time=int(max(stats.last_us, stats.first_us) * 1e3))
        for hop in self.chunks:
            attributes = {"starmesh.request_id": request_id, "starmesh.items": hop.num_new,
                          "starmesh.context_items": hop.num_context, "starmesh.bytes": hop.num_bytes,
                          "starmesh.transport": hop.transport,
                          "starmesh.latency_us": hop.dispatched_us - hop.produced_us}
            if hop.received_us:
                attributes["starmesh.consumer_wait_us"] = max(0.0, hop.dispatched_us - hop.received_us)
            span = tracer.start_span(f"edge {hop.edge}", context=parent_context, start_time=int(hop.produced_us * 1e3),
                                     attributes=attributes)
            span.end(end_time=int(max(hop.dispatched_us, hop.produced_us) * 1e3))
        self.edges.clear()
        self.chunks.clear()
