"""Executors wired to targets: every node in this process, or placed on replicas.

    async with inprocess_executor(graph, [toy_a, toy_b]) as ex:
        async for name, value in ex.generate("r1", {"x": (tensor,)}): ...
    async with remote_executor(graph, placement) as ex: ...

Targets hand their events to the executor and the executor routes node runs to
them: the executor builds them while it is built, through `connect(its sink)`.
Remote targets open their streams once the executor exists.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Callable

from conductor.executor import Executor
from conductor.executor_hooks import ExecutorHooks, Sink, ignore_edge, ignore_silence
from conductor.liveness import DEFAULT_SILENCE_S
from conductor.lockstep import LockstepPadder
from conductor.placement import Placement
from conductor.replica_targets import ReplicaTargets
from conductor.replicas import ReplicaSelector
from conductor.send_rounds import LINGER_S
from conductor.targets import InProcessTarget
from core.errors import GraphError
from graph.node import WALK_OUTPUT
from graph.walk import Walk, WalkGraph


def _materialize(value):
    """Stop rules on values the conductor holds by reference (inline only)."""
    import torch

    from transport.codec import view
    from transport.refs import TensorRef

    parts = [view(p.location.data, p.dtype, p.shape) if isinstance(p, TensorRef) else p for p in value]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


@contextlib.asynccontextmanager
async def inprocess_executor(graph: WalkGraph, components, inner_loops=frozenset(),
                             speculate: bool = True, max_backlog: int = 256) -> AsyncIterator[Executor]:
    """Every node runs on a component of this process (one engine thread each). Streaming
    edges between them are routed as between replicas, over local peer links."""
    from runtime.local_peers import LocalPeers

    loop = asyncio.get_running_loop()
    hosts = {node: i for i, c in enumerate(components) for node in c.nodes}
    targets: list[InProcessTarget] = []
    peers = LocalPeers()

    def connect(sink: Sink) -> ExecutorHooks:
        targets.extend(InProcessTarget(component, loop, sink, peers) for component in components)
        by_node = {node: target for target, c in zip(targets, components) for node in c.nodes}
        return ExecutorHooks(route=lambda node, walk, rid: by_node[node], materialize=_materialize,
                             colocated=lambda src, dst, walk: src in hosts and hosts.get(dst) == hosts[src],
                             peer_routes=True)

    try:
        executor = Executor(graph, connect, inner_loops, speculate=speculate, max_backlog=max_backlog)
        missing = [n.name for n in graph.nodes if n.name not in hosts]
        if missing:
            raise GraphError(f"no component hosts node(s) {missing}")
        yield executor
    finally:
        for target in targets:
            await target.close()


@contextlib.asynccontextmanager
async def remote_executor(graph: WalkGraph, placement: Placement, inner_loops=frozenset(),
                          tracer=None, speculate: bool = True,
                          lockstep_nodes=frozenset(),
                          on_edge: Callable[[str, float], None] | None = None,
                          tls=None, run_timeout_s: float = 10.0,
                          selector: ReplicaSelector | None = None,
                          max_message_bytes: int = 64 << 20,
                          targets: ReplicaTargets | None = None,
                          pacing=None, silence_s: float = DEFAULT_SILENCE_S,
                          on_silent: Callable[[str, str], None] | None = None) -> AsyncIterator[Executor]:
    """Nodes run on the replicas the placement names; one Run stream per replica.
    lockstep_nodes: runs padded across the placement's lockstep groups (conductor.lockstep);
    on_edge(edge, seconds): every hop's and chunk's latency (the metrics histogram);
    tls: the runtime.tls.TlsConfig of the Run streams (None: plaintext);
    run_timeout_s: a request a replica's heartbeats stop listing fails after this long;
    selector: the replica choice (shared with a health watcher that marks replicas down);
    max_message_bytes: the Run streams' message limit (larger batches go as several);
    targets: the streams (conductor.replica_targets), shared with whoever adds and drains
    replicas while it runs (conductor.membership); made here when None; pacing: the
    model's node -> core.pace.NodePace (media deadlines); silence_s, on_silent(replica,
    reason): a replica that sends nothing this long while it holds requests is hung, and
    on_silent hears of it (the health watcher marks it down; conductor.liveness)."""
    placement.validate(graph)
    selector = selector or ReplicaSelector(placement)
    targets = targets or ReplicaTargets(max_message_bytes, tls)

    def route(node: str, walk: str, request_id: str):
        return targets[selector.choose(request_id, graph.node_by_name[node], walk).endpoint]

    def hosts(node: str, walk: str) -> tuple[str, ...]:  # the replicas of now: membership changes
        return consumer_hosts(graph.walk_by_name[walk], placement, targets, node, selector.members)

    def connect(sink: Sink) -> ExecutorHooks:  # the streams open below, once the executor exists
        targets.bind(sink, (endpoint for spec in placement.services.values() for endpoint in spec.replicas))
        return ExecutorHooks(route, placement.is_colocated, hosts, _materialize, on_edge or ignore_edge,
                             _lockstep(placement, targets, lockstep_nodes), peer_routes=True,
                             on_silent=on_silent or ignore_silence)

    liveness = executor = None
    try:
        executor = Executor(graph, connect, inner_loops, tracer, speculate=speculate, run_timeout_s=run_timeout_s,
                            pacing=pacing, linger_s=LINGER_S,  # a Run stream write costs: clean-ups ride along
                            silence_s=silence_s)
        await targets.start()
        liveness = asyncio.create_task(_check_liveness(executor))
        yield executor
    finally:
        if liveness is not None:
            liveness.cancel()
        if executor is not None:
            executor.close()
        await targets.close()


async def _check_liveness(executor: Executor) -> None:
    """A hung replica's requests fail within silence_s, a dropped request within
    run_timeout_s, each plus one interval (a 16th of the shorter)."""
    while True:
        await asyncio.sleep(executor.liveness.interval_s)
        executor.check_liveness()


def _lockstep(placement: Placement, targets: ReplicaTargets, nodes) -> LockstepPadder | None:
    """Padding for the placement's lockstep groups; a group's rank is its service's one replica."""
    if not placement.lockstep_groups or not nodes:
        return None
    groups = {name: tuple(targets[placement.services[s].replicas[0]] for s in members)
              for name, members in placement.lockstep_groups.items()}
    return LockstepPadder(groups, nodes)


def consumer_hosts(walk: Walk, placement: Placement, targets, node: str, members=None) -> tuple[str, ...]:
    """Host ids of every replica that may consume `node`'s outputs in `walk` (the
    transport picks shm or Mooncake from these); members(service): the replicas of a
    service now (default: the placement's). The ports a walk output reads are the
    walk scope's client_ports: they travel inline whatever these hosts are."""
    hosts = set()
    for edge in walk.edges:
        if edge.src_node != node or edge.dst_node == WALK_OUTPUT:
            continue
        service = placement.service_name_for(edge.dst_node, walk.name)
        replicas = members(service) if members else placement.services[service].replicas
        hosts |= {targets[ep].host_id for ep in replicas if ep in targets}
    return tuple(sorted(h for h in hosts if h))
