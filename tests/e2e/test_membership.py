"""Replicas that come and go while requests run, for real: a loopback DNS server whose
A records change, `starmesh serve` replicas on 127.0.0.2.. sharing one port, and the
conductor following the name (bench/membership_mesh.py).

A replica that appears takes new requests once healthy; one that disappears takes no
new ones while its open requests finish; a killed one fails only its own requests,
UNAVAILABLE; a SIGTERMed one finishes what it holds and gets nothing after its health
says NOT_SERVING."""
from __future__ import annotations

import pytest

from bench.membership_mesh import MembershipMesh
from tests.fixtures import registry
from tests.fixtures.services import describe, wait_until
from transport.segment import sweep_stale_segments

pytestmark = pytest.mark.timeout(180)
WAIT_S = 60  # only a hung test waits this long


@pytest.fixture(scope="module")
def mesh():
    with MembershipMesh(num_replicas=4) as m:
        for host in m.hosts:
            registry.register(m.endpoint(host), describe(m.endpoint(host)).arena)
        yield m
        for host in m.hosts:
            registry.unregister(m.endpoint(host))


def settle(mesh: MembershipMesh, hosts: list[str]) -> None:
    """Publishes `hosts` and waits until they are exactly the conductor's serving members."""
    mesh.publish(hosts)
    wanted = {mesh.endpoint(h) for h in hosts}
    assert wait_until(lambda: set(mesh.members()) == wanted and all(mesh.is_serving(h) for h in hosts), WAIT_S), \
        (mesh.members(), mesh.service.replica_health.serving)


def outcomes(futures) -> list:
    return [f.result(timeout=WAIT_S) for f in futures]


def test_a_model_with_no_replica_yet_is_not_serving_then_serves_when_one_joins(mesh):
    a = mesh.hosts[0]
    assert mesh.model_health() == "NOT_SERVING"  # the name has no address yet
    refused = mesh.send("none-1").result(timeout=WAIT_S)
    assert refused[0] == "UNAVAILABLE" and "has no replica" in refused[1]
    settle(mesh, [a])
    assert wait_until(lambda: mesh.model_health() == "SERVING", WAIT_S)
    assert mesh.send("first-1").result(timeout=WAIT_S) == "ok"


def test_a_replica_that_appears_under_load_takes_new_requests(mesh):
    a, b = mesh.hosts[:2]
    settle(mesh, [a])
    load = [mesh.send(f"load-{i}", delay_s=1.0) for i in range(4)]
    mesh.publish([a, b])
    sent = 0
    # new requests reach it once it joined and passed health (the delay is bench.membership's)
    while mesh.open_requests(b) < 1:
        assert sent < 400, "the joined replica never got a request"
        load.append(mesh.send(f"join-{sent}", delay_s=1.0))
        sent += 1
        wait_until(lambda: mesh.open_requests(b) >= 1, 0.1)
    assert set(outcomes(load)) == {"ok"}


def test_a_replica_that_disappears_gets_no_new_requests_and_finishes_its_own(mesh):
    a, b = mesh.hosts[:2]
    settle(mesh, [a, b])
    before = [mesh.send(f"drain-{i}", delay_s=2.0) for i in range(4)]
    assert wait_until(lambda: mesh.open_requests(a) + mesh.open_requests(b) == 4, WAIT_S)
    on_a = mesh.open_requests(a)
    assert on_a >= 1  # least-loaded round-robin spreads them
    mesh.publish([b])
    assert wait_until(lambda: mesh.members() == (mesh.endpoint(b),), WAIT_S)
    after = [mesh.send(f"after-{i}", delay_s=2.0) for i in range(4)]
    assert wait_until(lambda: all(mesh.reached(f"after-{i}") for i in range(4)), WAIT_S)
    assert all(mesh.reached(f"after-{i}") == {mesh.endpoint(b)} for i in range(4))
    assert mesh.open_requests(a) <= on_a
    assert set(outcomes(before + after)) == {"ok"}  # those on the leaving replica finished there
    # its stream closes once no open request needs it
    assert wait_until(lambda: mesh.endpoint(a) not in mesh.service.targets["echo"], WAIT_S)
    mesh.service.selectors["echo"].check_integrity()


def test_a_killed_replica_fails_only_its_requests_with_unavailable(mesh):
    b, c = mesh.hosts[1:3]
    settle(mesh, [b, c])
    held = [mesh.send(f"kill-{i}", delay_s=3.0) for i in range(6)]
    assert wait_until(lambda: mesh.open_requests(b) + mesh.open_requests(c) == 6, WAIT_S)
    on_c = mesh.open_requests(c)
    assert on_c >= 1
    mesh.replicas[c].kill()
    mesh.publish([b])  # the pod is gone: so is its record
    results = outcomes(held)
    failed = [r for r in results if r != "ok"]
    assert len(failed) == on_c, results
    assert all(code == "UNAVAILABLE" and mesh.endpoint(c) in details for code, details in failed), failed
    assert mesh.send("after-kill", delay_s=0.0).result(timeout=WAIT_S) == "ok"
    registry.unregister(mesh.endpoint(c))
    sweep_stale_segments()  # the killed replica's arena (its owner is dead)


def test_sigterm_drains_a_replica_and_nothing_is_routed_to_it_after(mesh):
    b, d = mesh.hosts[1], mesh.hosts[3]
    settle(mesh, [b, d])
    held = [mesh.send(f"term-{i}", delay_s=2.0) for i in range(4)]
    assert wait_until(lambda: mesh.open_requests(b) + mesh.open_requests(d) == 4, WAIT_S)
    assert mesh.open_requests(d) >= 1
    mesh.replicas[d].terminate()  # its record stays: the health watch alone stops the routing
    assert wait_until(lambda: not mesh.service.replica_health.serving.get(mesh.endpoint(d), True), WAIT_S)
    after = [mesh.send(f"post-term-{i}", delay_s=1.0) for i in range(4)]
    assert wait_until(lambda: all(mesh.reached(f"post-term-{i}") for i in range(4)), WAIT_S)
    assert all(mesh.reached(f"post-term-{i}") == {mesh.endpoint(b)} for i in range(4))
    assert set(outcomes(held + after)) == {"ok"}  # what it held finished during its grace period
    assert mesh.replicas[d].proc.wait(WAIT_S) == 0
    registry.unregister(mesh.endpoint(d))
