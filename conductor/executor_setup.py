"""Executors wired to targets: every node in this process, or placed on replicas.

    async with inprocess_executor(graph, [toy_a, toy_b]) as ex:
        async for name, value in ex.generate("r1", {"x": (tensor,)}): ...
    async with remote_executor(graph, placement) as ex: ...
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import AsyncIterator

from conductor.executor import Executor
from conductor.lockstep import LockstepPadder
from conductor.placement import Placement
from conductor.replicas import ReplicaSelector
from conductor.targets import InProcessTarget, RemoteTarget
from core.errors import GraphError
from graph.walk import WalkGraph


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
    """Every node runs on a component of this process (one engine thread each)."""
    loop = asyncio.get_running_loop()
    by_node, targets = {}, []
    hosts = {node: i for i, c in enumerate(components) for node in c.nodes}
    executor = Executor(graph, lambda node, walk, rid: by_node[node], inner_loops, _materialize,
                        speculate=speculate, max_backlog=max_backlog,
                        colocated=lambda src, dst, walk: src in hosts and hosts.get(dst) == hosts[src])
    for component in components:
        target = InProcessTarget(component, loop, executor.on_events)
        targets.append(target)
        by_node.update({node: target for node in component.nodes})
    missing = [n.name for n in graph.nodes if n.name not in by_node]
    try:
        if missing:
            raise GraphError(f"no component hosts node(s) {missing}")
        yield executor
    finally:
        for target in targets:
            await target.close()


@contextlib.asynccontextmanager
async def remote_executor(graph: WalkGraph, placement: Placement, inner_loops=frozenset(),
                          tracer=None, interceptors=None, speculate: bool = True,
                          lockstep_nodes=frozenset()) -> AsyncIterator[Executor]:
    """Nodes run on the replicas the placement names; one Run stream per replica.
    lockstep_nodes: runs padded across the placement's lockstep groups (conductor.lockstep)."""
    placement.validate(graph)
    selector = ReplicaSelector(placement)
    targets: dict[str, RemoteTarget] = {}

    def route(node: str, walk: str, request_id: str) -> RemoteTarget:
        return targets[selector.choose(request_id, graph.node_by_name[node], walk).endpoint]

    executor = Executor(graph, route, inner_loops, _materialize, tracer, speculate=speculate,
                        colocated=placement.is_colocated)
    executor.consumer_hosts = functools.lru_cache(maxsize=None)(
        lambda node, walk: consumer_hosts(executor.scopes[walk], placement, targets, node, walk))
    try:
        for spec in placement.services.values():
            for endpoint in spec.replicas:
                targets[endpoint] = await RemoteTarget(endpoint, executor.on_events, interceptors=interceptors).start()
        if placement.lockstep_groups and lockstep_nodes:
            groups = {name: tuple(targets[placement.services[s].replicas[0]] for s in members)
                      for name, members in placement.lockstep_groups.items()}
            executor.lockstep = LockstepPadder(groups, lockstep_nodes)
        yield executor
    finally:
        for target in targets.values():
            await target.close()


def consumer_hosts(scope, placement: Placement, targets: dict, node: str, walk: str) -> tuple[str, ...]:
    """Host ids of every replica that may consume `node`'s outputs in `walk`, and the
    client's marker when a walk output reads them (the transport picks inline, shm or
    Mooncake from these)."""
    from graph.node import WALK_OUTPUT
    from transport.config import CLIENT_HOST

    hosts = set()
    for edge in scope.out_edges[node]:
        if edge.dst_node == WALK_OUTPUT:
            hosts.add(CLIENT_HOST)
        else:
            hosts |= {targets[ep].host_id for ep in placement.service_for(edge.dst_node, walk).replicas}
    return tuple(sorted(h for h in hosts if h))
