"""Co-located streaming edges: a producer run's outputs feed a consumer node of
the same process without leaving it.

The conductor names such edges in the producer's OpenNode (`local_streams`) and sends
nothing on them. Here each producer output on `src_port` goes into the edge's
StreamBuffer; every chunk the policy forms becomes an OpenNode of `dst_node` at
dst_iteration + (k,) with the chunk's items concatenated along dim 0 as `dst_port`
(the parts convention). When the producer is done and every chunk run has ended, a
NodeDone for dst_node at dst_iteration tells the conductor the consumer is done.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from graph.stream_buffer import StreamBuffer
from runtime.items import ChunkInfo, ColocatedStream, NodeDone, OpenNode

RunKey = tuple[str, str, tuple[int, ...]]  # (request, node, iteration)


@dataclass
class _Edge:
    spec: ColocatedStream
    producer: OpenNode
    buffer: StreamBuffer
    num_opened: int = 0
    num_running: int = 0

    @property
    def is_drained(self) -> bool:
        return self.buffer.is_closed and self.num_running == 0


class ColocatedStreams:
    def __init__(self) -> None:
        self.edges: dict[RunKey, list[_Edge]] = {}   # producer run -> its local edges
        self.consumers: dict[RunKey, _Edge] = {}     # consumer chunk run -> its edge
        self.num_chunks = 0                          # chunk runs opened in-process, ever

    def register(self, item: OpenNode) -> None:
        if item.local_streams:
            self.edges[(item.request_id, item.node, item.iteration)] = [
                _Edge(s, item, StreamBuffer(s.policy, s.max_buffered, name=f"local edge {item.node}.{s.src_port} "
                                            f"-> {s.dst_node}.{s.dst_port}")) for s in item.local_streams]

    def on_output(self, request_id: str, node: str, iteration: tuple[int, ...], tensors: dict):
        """A producer output (at its run's iteration + (k,)): the consumer runs now ready."""
        edges = self.edges.get((request_id, node, iteration[:-1]), ())
        opens = []
        for edge in edges:
            if edge.spec.src_port in tensors:
                edge.buffer.push([tensors[edge.spec.src_port]])
                opens += self._ready(edge)
        return opens

    def on_done(self, request_id: str, node: str, iteration: tuple[int, ...]):
        """A run ended: (consumer opens now ready, NodeDone markers of drained consumers)."""
        opens, markers = [], []
        edge = self.consumers.pop((request_id, node, iteration), None)
        if edge is not None:
            edge.num_running -= 1
            markers += self._marker(edge)
        for edge in self.edges.get((request_id, node, iteration), ()):
            edge.buffer.finish()
            opens += self._ready(edge)
            markers += self._marker(edge)
        return opens, markers

    def _ready(self, edge: _Edge) -> list[tuple[OpenNode, dict]]:
        opens = []
        for chunk in edge.buffer.pop_ready():
            if not chunk.items:  # the empty end-of-stream marker: nothing to run
                continue
            s, p = edge.spec, edge.producer
            item = replace(p, node=s.dst_node, iteration=s.dst_iteration + (edge.num_opened,), inputs={},
                           chunk=ChunkInfo(chunk.start, chunk.num_context, chunk.is_last, chunk.num_pad),
                           stream=None, local_streams=(), credits={})
            edge.num_opened += 1
            edge.num_running += 1
            self.num_chunks += 1
            self.consumers[(item.request_id, item.node, item.iteration)] = edge
            opens.append((item, {s.dst_port: torch.cat(list(chunk.items))}))
        return opens

    def _marker(self, edge: _Edge) -> list[NodeDone]:
        if not edge.is_drained:
            return []
        key = (edge.producer.request_id, edge.producer.node, edge.producer.iteration)
        remaining = [e for e in self.edges.get(key, ()) if e is not edge]
        if remaining:
            self.edges[key] = remaining
        else:
            self.edges.pop(key, None)
        return [NodeDone(edge.producer.request_id, edge.spec.dst_node, iteration=edge.spec.dst_iteration)]

    def cancel(self, request_id: str) -> None:
        self.edges = {k: v for k, v in self.edges.items() if k[0] != request_id}
        self.consumers = {k: v for k, v in self.consumers.items() if k[0] != request_id}
