"""What an executor is wired to, all given when it is built: where node runs go
(route), what the placement knows about them (co-location, consumer hosts,
lockstep groups) and where its per-edge latencies go (on_edge).

The targets that `route` returns send their events to the executor, so the executor
builds its hooks itself through a `Connect` function that receives its event sink."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from conductor.lockstep import LockstepPadder
from conductor.walk_scope import never_colocated
from conductor.walk_state import as_is
from core.errors import InvalidArgument

Route = Callable[[str, str, str], Any]  # (node, walk, request_id) -> target
Sink = Callable[[list, Any], None]  # (a target's batch of events, that target) -> None


def no_consumer_hosts(node: str, walk: str) -> tuple[str, ...]:
    return ()


def ignore_edge(edge: str, seconds: float) -> None:
    pass


def ignore_silence(replica: str, reason: str) -> None:
    pass


@dataclass(frozen=True)
class ExecutorHooks:
    route: Route
    # (src, dst, walk): both nodes run in one process, so a routed streaming edge
    # between them is handed over there (WalkScope.routed_in)
    colocated: Callable[[str, str, str], bool] = never_colocated
    # (node, walk) -> host ids of the services reading its outputs (walk outputs: WalkScope.client_ports)
    consumer_hosts: Callable[[str, str], tuple[str, ...]] = no_consumer_hosts
    materialize: Callable[[tuple], Any] = as_is  # a value held by reference -> tensor (stop rules)
    on_edge: Callable[[str, float], None] = ignore_edge  # (edge, seconds) per hop or chunk: metrics
    lockstep: LockstepPadder | None = None  # pads the ranks of the placement's lockstep groups
    # the targets are replicas whose runtimes reach each other: streaming edges between
    # them go producer -> consumer directly (else only co-located ones do)
    peer_routes: bool = False
    # (replica, reason): it went silent while holding requests (conductor.liveness): mark it down
    on_silent: Callable[[str, str], None] = ignore_silence

    def can_route(self, src: str, dst: str, walk: str) -> bool:
        return self.peer_routes or self.colocated(src, dst, walk)

    def __post_init__(self) -> None:
        for name in ("route", "colocated", "consumer_hosts", "materialize", "on_edge", "on_silent"):
            if not callable(getattr(self, name)):
                raise InvalidArgument(f"executor hooks: {name} must be callable, got {getattr(self, name)!r}")
        if self.lockstep is not None and not isinstance(self.lockstep, LockstepPadder):
            raise InvalidArgument(f"executor hooks: lockstep must be a LockstepPadder, got {self.lockstep!r}")


Connect = Callable[[Sink], ExecutorHooks]  # builds the targets over the executor's sink
