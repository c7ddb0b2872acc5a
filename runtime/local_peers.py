"""Peer links between engine threads of one process: the in-process executor's data plane.

Components the in-process executor hosts each run on their own engine thread
(runtime.step_loop), as replicas do in their own processes. Their routed edges use the
same producer and consumer halves (runtime.routed_edges) as replicas': a producer's
engine step posts one PushBatch per consumer, which goes straight into the consumer's
inbox (rows stay tensors: the transport of an in-process target keeps them), and the
consumer's credits and refusals go straight into the producer's. So a walk run in-process
routes exactly like one placed on replicas, and the conductor dispatches no chunks.
"""
from __future__ import annotations

from typing import Any


class LocalPeers:
    """The engine threads of one process, by the name routes give as their peer."""

    def __init__(self) -> None:
        self.loops: dict[str, Any] = {}  # name -> runtime.step_loop.StepLoop
        self._linked: set[tuple[str, str]] = set()  # (producer, consumer) streams attached

    def link(self, name: str) -> "LocalLink":
        """The peers object of the engine thread `name` (a StepLoop's `peers`)."""
        return LocalLink(self, name)

    def add(self, name: str, loop: Any) -> None:
        if name in self.loops:
            raise ValueError(f"local peer {name!r} is already registered")
        self.loops[name] = loop

    def post(self, producer: str, consumer: str, items: list) -> None:
        """Producer's engine thread: its step's batches into the consumer's inbox, in
        order, on a stream of the pair's own (the consumer binds routes to it)."""
        source, target = self.loops.get(producer), self.loops.get(consumer)
        if source is None:
            raise ValueError(f"local peer {producer!r} is not registered")
        if target is None:
            source.peer_broken(consumer, f"no engine thread {consumer!r} in this process")
            return
        stream = f"local-peer:{producer}"
        if (producer, consumer) not in self._linked:  # inbox order: attached before its first batch
            self._linked.add((producer, consumer))
            target.attach(stream, lambda events: source.peer_events(consumer, events))
            target.name_stream(stream, producer)
        target.submit(stream, [(f"items[{i}]", item) for i, item in enumerate(items)])


class LocalLink:
    """What a producer's routed edges post on (the interface of runtime.peer_links)."""

    carries_tensors = True  # batches arrive as they were posted: their rows must be their own

    def __init__(self, peers: LocalPeers, name: str) -> None:
        self.peers, self.name = peers, name

    def post(self, peer: str, items: list) -> None:
        self.peers.post(self.name, peer, items)
