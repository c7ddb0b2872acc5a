"""Replicas joining, draining and dying under load, on loopback: a DNS name whose A
records change (bench/membership_mesh.py), `busy_s` echo requests that each take one
replica's time (so throughput grows with replicas), closed-loop clients.

    python -m bench.membership --json bench-results/membership.json [--quick]

Figures: throughput_before / throughput_after (requests/s with one replica, then two),
first_request_after_join_s (the second replica's A record appears -> its first request
arrives: one DNS refresh, a health watch, a stream), drain_s (its record goes -> it holds
no request and its stream is closed), requests_lost (failed requests that were not on
the replica killed meanwhile: must be 0), requests_failed_on_killed (those that were).
"""
from __future__ import annotations

import argparse
import itertools
import os
import threading
import time

from bench.membership_mesh import MembershipMesh
from bench.output import write_json


class Load:
    """`num_clients` closed loops of one request each until stop(); outcomes with end times."""

    def __init__(self, mesh: MembershipMesh, num_clients: int, busy_s: float) -> None:
        self.mesh, self.busy_s = mesh, busy_s
        self.outcomes: list[tuple[float, object]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ids = itertools.count()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(num_clients)]

    def start(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def _client(self) -> None:
        while not self._stop.is_set():
            outcome = self.mesh.call(f"bench-{next(self._ids)}", busy_s=self.busy_s)
            with self._lock:
                self.outcomes.append((time.monotonic(), outcome))

    def ok_rate(self, window_s: float) -> float:
        """Successful requests per second over the next `window_s`."""
        t0 = time.monotonic()
        time.sleep(window_s)
        with self._lock:
            done = sum(1 for t, o in self.outcomes if t >= t0 and o == "ok")
        return done / window_s

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(180)


def _wait(predicate, timeout_s: float = 120.0, poll_s: float = 0.01) -> float:
    """Seconds until `predicate()` holds (TimeoutError past `timeout_s`)."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError("the mesh never got there")
        time.sleep(poll_s)
    return time.monotonic() - t0


def measure_membership(num_clients: int = 8, busy_s: float = 0.05, window_s: float = 3.0,
                       refresh_s: float = 2.0) -> dict:
    with MembershipMesh(num_replicas=3, refresh_s=refresh_s) as mesh:
        a, b, c = mesh.hosts
        mesh.publish([a])
        _wait(lambda: mesh.is_serving(a))
        load = Load(mesh, num_clients, busy_s).start()
        try:
            throughput_before = load.ok_rate(window_s)
            mesh.publish([a, b])
            first = _wait(lambda: mesh.open_requests(b) > 0)
            throughput_after = load.ok_rate(window_s)
            mesh.publish([a])
            drain_s = _wait(lambda: mesh.open_requests(b) == 0 and mesh.endpoint(b) not in mesh.service.targets["echo"])
            mesh.publish([a, c])
            _wait(lambda: mesh.open_requests(c) > 0)
            mesh.replicas[c].kill()
            mesh.publish([a])
            _wait(lambda: mesh.endpoint(c) not in mesh.members())
            load.ok_rate(1.0)  # traffic goes on without it
        finally:
            load.stop()
    failed = [o for _t, o in load.outcomes if o != "ok"]
    on_killed = [o for o in failed if mesh.endpoint(c) in o[1]]
    from transport.segment import sweep_stale_segments

    sweep_stale_segments()  # the killed replica's arena
    return {"requests_lost": len(failed) - len(on_killed), "requests_failed_on_killed": len(on_killed),
            "requests_total": len(load.outcomes), "first_request_after_join_s": round(first, 3),
            "drain_s": round(drain_s, 3), "throughput_before": round(throughput_before, 1),
            "throughput_after": round(throughput_after, 1), "refresh_s": refresh_s, "busy_s": busy_s,
            "num_clients": num_clients}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--busy-s", type=float, default=0.05, help="replica time per request")
    p.add_argument("--refresh-s", type=float, default=2.0, help="DNS refresh (the rendered manifests' default)")
    p.add_argument("--window-s", type=float, default=3.0, help="each throughput window")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 clients, 0.2 s DNS refresh, 1 s windows")
    args = p.parse_args(argv)
    if args.quick:
        args.clients, args.refresh_s, args.window_s = 2, 0.2, 1.0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = measure_membership(args.clients, args.busy_s, args.window_s, args.refresh_s)
    for key, value in out.items():
        print(f"{key:30s} {value}")
    write_json(args.json, out)


if __name__ == "__main__":
    main()
