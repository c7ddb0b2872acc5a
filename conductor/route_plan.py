"""The routes a producer run is given, and the grants its consumers get.

When the conductor opens a run whose outputs feed routed streaming edges
(WalkScope.routed_out), it picks each consumer's replica once for the request, makes a
token per route, and sends the consumer an AcceptRoute: for a consumer fed one chunk
per run (routed_in), a template of its chunk runs, carrying that node's own routes when
it feeds a routed edge too (a chain is planned whole); for a loop run fed by pushes
(routed_push), just its identity (the conductor opens that run itself). A co-located
consumer is reached in-process (peer ""), on the producer's own replica.
"""
from __future__ import annotations

import secrets
import time
from typing import Any

from conductor.chunk_override import request_policy
from runtime.items import AcceptRoute, EdgeRoute, OpenNode

Grant = tuple[Any, AcceptRoute]  # (the consumer's target, what it is sent)


def plan_routes(run, scope, node: str, tag: tuple[int, ...], producer, hooks,
                traceparent: str) -> tuple[tuple[EdgeRoute, ...], list[Grant]]:
    """Routes for `node`'s run at `tag` on target `producer`, and the grants they need."""
    routes, grants = [], []
    for edge in scope.routed_out.get(node, ()):
        dst = edge.dst_node
        dst_tag = tag[:scope.common(node, dst)]
        if hooks.colocated(node, dst, run.walk):
            target, peer, host = producer, "", ""
        else:
            target = run.targets.get((dst, dst_tag)) or hooks.route(dst, run.walk, run.request_id)
            peer, host = target.name, getattr(target, "host_id", "")
        run.targets[(dst, dst_tag)] = target
        run.reach(target, time.monotonic())  # its Cancel frees the request there too
        token = secrets.token_hex(16)
        routes.append(EdgeRoute(edge.src_port, dst, edge.dst_port, request_policy(edge, run.params), dst_tag,
                                edge.max_buffered, peer, host, token, str(edge)))
        is_push = dst in scope.routed_push
        if is_push:
            template = OpenNode(run.request_id, dst, run.walk, dst_tag, traceparent=traceparent,
                                pace=run.pace_of(dst), contexts=run.contexts)
        else:
            sub_routes, sub_grants = plan_routes(run, scope, dst, dst_tag, target, hooks, traceparent)
            grants += sub_grants
            template = OpenNode(run.request_id, dst, run.walk, dst_tag, params=run.params, traceparent=traceparent,
                                consumer_host_ids=hooks.consumer_hosts(dst, run.walk),
                                client_ports=scope.client_ports.get(dst, ()), routes=sub_routes,
                                quiet_ports=scope.quiet_for(dst, run.silent),
                                credits=run.state.credits.initial(dst, dst_tag),  # client room
                                pace=run.pace_of(dst),  # route_in sets each chunk run's first item
                                contexts=run.contexts)
        grants.append((target, AcceptRoute(token, template, edge.dst_port, is_push, str(edge), edge.max_buffered,
                                           edge.is_per_item)))
    return tuple(routes), grants
