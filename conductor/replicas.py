"""Replica choice: which replica of a node's service runs one request's node run.

Rules ("a stateful node stays on the replica that holds its
request's KV context; load balancing happens at admission and for stateless nodes"):

1. A request that is pinned on a service (one of its stateful nodes was admitted
   there) runs *every* node on that service on the pinned replica: stateful nodes
   because the KV context is there, stateless ones because they are co-located
   with it (talker + code2wav) and their edge is handed over in-process only on
   one replica.
1b. Otherwise, a replica the request has an affinity for (`hold`: it keeps the KV
   context the request continues, or its cache holds most of the request's prompt) when
   it belongs to the service and is up; the least loaded of several.
2. Otherwise a `prefer`red replica (the producer's, passed by the executor to keep
   an edge between co-located nodes in-process) is taken when it belongs to the
   service.
3. Otherwise the least-loaded replica, ties broken round-robin per service.
   Admission of a stateful node pins the request there until `release`.
4. Replicas marked down (`set_serving`, from the conductor's health watcher) are not
   chosen by rules 2 and 3 while the service has one that is up; with none up, all are
   candidates (a replica that just restarted serves before its health watch says so; a
   dead one fails the request at once, UNAVAILABLE naming it). A pinned request stays
   where its state is (if that replica died, its stream's failure fails the request).

5. Membership may change while requests run (conductor/membership.py): `add` makes a
   replica a candidate; `retire` drains one: never chosen again by rules 2 and 3, while
   requests pinned there keep it (they finish or fail there) until the last is released,
   and then it is gone.

Load is the number of open requests pinned to a replica (the selector's own
count; stateless runs are short and have no completion signal here, so they
are not counted: a stateless-only service is served round-robin).

Pure Python, no I/O; thread-safe (one lock). Check/act: `peek` says what
`choose` would pick without changing anything; `choose` picks and records.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from conductor.placement import Placement
from core.errors import Unavailable


@dataclass(frozen=True)
class Route:
    """Where one node run goes: the service and the replica's endpoint."""

    service: str
    endpoint: str


class ReplicaSelector:
    """Chooses replicas per (request, node, walk) over a Placement's services.

    Invariant (check_integrity): each replica's load equals the number of pins
    on it, and every pin names a replica of its service.
    """

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self._lock = threading.Lock()
        self._pins: dict[tuple[str, str], str] = {}  # (service, request_id) -> endpoint
        self._services_of: dict[str, set[str]] = {}  # request_id -> services it is pinned on
        self._load = {name: dict.fromkeys(spec.replicas, 0) for name, spec in placement.services.items()}
        self._cursor = dict.fromkeys(placement.services, 0)  # round-robin start per service
        self._down: set[str] = set()  # endpoints not serving (health watcher)
        self._retired: set[str] = set()  # draining: still in _load while requests are pinned there
        self._affinity: dict[str, frozenset[str]] = {}  # request_id -> endpoints holding its context

    def hold(self, request_id: str, endpoints: frozenset[str]) -> None:
        """Rule 1b: the request continues a context these replicas keep (until `release`)."""
        with self._lock:
            if endpoints:
                self._affinity[request_id] = endpoints

    # --- check / act -------------------------------------------------------------

    def peek(self, request_id: str, node, walk: str, prefer: str | None = None) -> Route:
        """What `choose` would return now, without recording anything."""
        service = self.placement.service_name_for(node.name, walk)
        with self._lock:
            endpoint, _index = self._pick(service, request_id, prefer)
        return Route(service, endpoint)

    def choose(self, request_id: str, node, walk: str, prefer: str | None = None) -> Route:
        """The replica for `node` (a GraphNode) of `request_id` in `walk`; admits
        and pins the request when the node is stateful and it is not pinned yet."""
        service = self.placement.service_name_for(node.name, walk)
        with self._lock:
            endpoint, index = self._pick(service, request_id, prefer)
            if index is not None:  # a least-loaded pick moves the round-robin on
                self._cursor[service] = index + 1
            if node.stateful and (service, request_id) not in self._pins:
                self._pins[(service, request_id)] = endpoint
                self._services_of.setdefault(request_id, set()).add(service)
                self._load[service][endpoint] += 1
        return Route(service, endpoint)

    def _pick(self, service: str, request_id: str, prefer: str | None) -> tuple[str, int | None]:
        """(endpoint, replica index when chosen by load else None); under the lock."""
        pinned = self._pins.get((service, request_id))
        if pinned is not None:
            return pinned, None
        load = self._load[service]
        held = [e for e in self._affinity.get(request_id, ())
                if e in load and e not in self._down and e not in self._retired]
        if held:  # the least loaded of them (a context has one; a cached prefix may have several)
            return min(held, key=lambda e: (load[e], e)), None
        if prefer is not None and prefer in load and prefer not in self._down and prefer not in self._retired:
            return prefer, None
        replicas = [r for r in load if r not in self._retired]
        if not replicas:
            raise Unavailable(f"service {service} has no replica (none has joined yet, or every one left)")
        # With every replica down, try them anyway: one that just came back serves at once
        # (the health watch notices it a little later), a dead one fails the request fast.
        up = [i for i, r in enumerate(replicas) if r not in self._down] or list(range(len(replicas)))
        start = self._cursor[service]
        # Least load first; among equals, the first at or after the cursor (round-robin).
        index = min(up, key=lambda i: (load[replicas[i]], (i - start) % len(replicas)))
        return replicas[index], index

    def release(self, request_id: str) -> int:
        """Drops every pin of `request_id` (request finished, failed or cancelled);
        returns how many. Releasing an unknown or released request is a no-op,
        since cancellation may race with completion."""
        with self._lock:
            self._affinity.pop(request_id, None)
            services = self._services_of.pop(request_id, set())
            for service in services:
                endpoint = self._pins.pop((service, request_id))
                self._load[service][endpoint] -= 1
                self._drop_if_drained(service, endpoint)
        return len(services)

    def add(self, service: str, endpoint: str, is_serving: bool = False) -> None:
        """A replica joins `service` (or a draining one is taken back); `is_serving`: its
        health so far (a joining replica is a candidate of its own once it passes)."""
        with self._lock:
            self._retired.discard(endpoint)
            self._load[service].setdefault(endpoint, 0)
            (self._down.discard if is_serving else self._down.add)(endpoint)

    def retire(self, service: str, endpoint: str) -> None:
        """Drains a replica of `service` (rule 5); an endpoint it does not have is a no-op."""
        with self._lock:
            if endpoint in self._load[service]:
                self._retired.add(endpoint)
                self._drop_if_drained(service, endpoint)

    def _drop_if_drained(self, service: str, endpoint: str) -> None:
        if endpoint in self._retired and self._load[service][endpoint] == 0:
            del self._load[service][endpoint]
            self._retired.discard(endpoint)
            self._down.discard(endpoint)

    def has_choice(self) -> bool:
        """Whether a service here has more than one replica to choose from (not draining)."""
        with self._lock:
            return any(sum(r not in self._retired for r in load) > 1 for load in self._load.values())

    def members(self, service: str) -> tuple[str, ...]:
        """The replicas of `service` that new requests may be sent to (not draining)."""
        with self._lock:
            return tuple(r for r in self._load[service] if r not in self._retired)

    def endpoints(self) -> set[str]:
        """Every replica still known here, draining ones included."""
        with self._lock:
            return {r for load in self._load.values() for r in load}

    def set_serving(self, endpoint: str, is_serving: bool) -> None:
        """The health watcher's news about a replica (an endpoint of no service here is ignored)."""
        with self._lock:
            if is_serving:
                self._down.discard(endpoint)
            elif any(endpoint in load for load in self._load.values()):
                self._down.add(endpoint)

    def unserved(self) -> list[str]:
        """Services with no serving replica (the model is NOT_SERVING while any is)."""
        with self._lock:
            return sorted(name for name, load in self._load.items()
                          if all(r in self._down or r in self._retired for r in load))

    # --- introspection -------------------------------------------------------------

    def load(self, service: str) -> dict[str, int]:
        """Open (pinned) requests per replica of `service`."""
        with self._lock:
            return dict(self._load[service])

    def pinned(self, request_id: str) -> dict[str, str]:
        """service -> endpoint for every service the request is pinned on."""
        with self._lock:
            return {s: self._pins[(s, request_id)] for s in self._services_of.get(request_id, ())}

    @property
    def num_pinned(self) -> int:
        with self._lock:
            return len(self._pins)

    def check_integrity(self) -> None:
        """Asserts: load counts equal the pinned map, pins name their service's
        replicas, and the per-request index matches the pins."""
        with self._lock:
            counts = {name: dict.fromkeys(load, 0) for name, load in self._load.items()}
            for (service, _request), endpoint in self._pins.items():
                assert endpoint in counts[service], f"pin on {endpoint}, not a replica of {service}"
                counts[service][endpoint] += 1
            assert counts == self._load, f"loads {self._load} != pins {counts}"
            index = {(s, r) for r, services in self._services_of.items() for s in services}
            assert index == set(self._pins), "per-request index does not match the pins"
            assert all(self._services_of.values()), "a request with no pins is still indexed"
            for endpoint in self._retired:
                assert any(load.get(endpoint) for load in self._load.values()), \
                    f"drained replica {endpoint} is still held"
