"""Replica choice: stateful nodes stick to the admitting replica, the rest is balanced."""
from __future__ import annotations

import dataclasses
import random
import threading
from pathlib import Path

import pytest

from conductor.placement import Placement
from conductor.replicas import ReplicaSelector, Route
from graph.node import GraphNode

DEPLOYMENTS = Path(__file__).resolve().parents[2] / "compose" / "deployments"
B = GraphNode("b", inputs=("x",), outputs=("y",), stateful=True)
C = GraphNode("c", inputs=("x",), outputs=("y",))
B1, B2 = "127.0.0.1:50072", "127.0.0.1:50073"


def colocated_selector() -> ReplicaSelector:
    return ReplicaSelector(Placement.from_yaml(DEPLOYMENTS / "toy-colocated.yaml"))


def test_stateful_node_sticks_to_its_replica():
    sel = colocated_selector()
    first = sel.choose("r1", B, "gen")
    assert first == Route("svc_bc", B1)
    assert sel.choose("r2", B, "gen").endpoint == B2  # admission: least loaded
    for _ in range(5):
        assert sel.choose("r1", B, "gen") == first  # every later run: the admitting replica
    assert sel.load("svc_bc") == {B1: 1, B2: 1}
    assert sel.pinned("r1") == {"svc_bc": B1}
    sel.check_integrity()


def test_admission_goes_to_least_loaded():
    sel = colocated_selector()
    sel.choose("r1", B, "gen")
    sel.choose("r2", B, "gen")
    sel.choose("r3", B, "gen")  # B1 now holds r1 and r3
    sel.release("r2")
    assert sel.choose("r4", B, "gen").endpoint == B2
    assert sel.load("svc_bc") == {B1: 2, B2: 1}
    sel.check_integrity()


def test_stateless_node_is_balanced_round_robin_on_ties():
    sel = ReplicaSelector(Placement.from_yaml(DEPLOYMENTS / "toy-local.yaml"))
    b1, b2 = "127.0.0.1:50062", "127.0.0.1:50063"
    stateless_b = dataclasses.replace(B, stateful=False)
    picks = [sel.choose(f"r{i}", stateless_b, "gen").endpoint for i in range(4)]
    assert picks == [b1, b2, b1, b2]
    assert sel.num_pinned == 0 and sel.load("svc_b") == {b1: 0, b2: 0}  # stateless runs pin nothing


def test_stateless_node_prefers_the_less_loaded_replica():
    sel = ReplicaSelector(Placement.from_yaml(DEPLOYMENTS / "toy-local.yaml"))
    stateless_b = dataclasses.replace(B, stateful=False)
    sel.choose("r1", B, "gen")  # pins r1 on 50062
    assert {sel.choose(f"s{i}", stateless_b, "gen").endpoint for i in range(3)} == {"127.0.0.1:50063"}


def test_colocated_stateless_node_follows_the_pin():
    sel = colocated_selector()
    sel.choose("r1", B, "gen")
    sel.choose("r2", B, "gen")
    for _ in range(3):  # c of r2 runs where b of r2 holds its context: in-process edge
        assert sel.choose("r2", C, "gen") == Route("svc_bc", B2)
    assert sel.choose("r3", C, "gen", prefer=B2).endpoint == B2  # the producer's replica
    assert sel.choose("r3", C, "gen", prefer="10.0.0.1:1").endpoint in (B1, B2)  # not ours: ignored


def test_peek_changes_nothing():
    sel = colocated_selector()
    assert sel.peek("r1", B, "gen") == sel.peek("r1", B, "gen") == Route("svc_bc", B1)
    assert sel.num_pinned == 0
    assert sel.choose("r1", B, "gen") == Route("svc_bc", B1)


def test_release():
    sel = colocated_selector()
    sel.choose("r1", B, "gen")
    assert sel.release("r1") == 1
    assert sel.release("r1") == 0  # idempotent: cancel may race with completion
    assert sel.release("never") == 0
    assert sel.load("svc_bc") == {B1: 0, B2: 0} and sel.pinned("r1") == {}
    sel.check_integrity()


def test_integrity_detects_a_broken_count():
    sel = colocated_selector()
    sel.choose("r1", B, "gen")
    sel._load["svc_bc"][B2] += 1  # corrupt on purpose
    with pytest.raises(AssertionError, match="loads"):
        sel.check_integrity()


def test_concurrent_choose_and_release_keep_integrity():
    sel = colocated_selector()
    errors = []

    def worker(k: int) -> None:
        rng = random.Random(k)
        try:
            for i in range(200):
                rid = f"w{k}-{i}"
                home = sel.choose(rid, B, "gen")
                for _ in range(rng.randint(0, 3)):
                    assert sel.choose(rid, rng.choice([B, C]), "gen") == home
                sel.release(rid)
        except AssertionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    sel.check_integrity()
    assert sel.num_pinned == 0 and sel.load("svc_bc") == {B1: 0, B2: 0}


def dns_selector() -> ReplicaSelector:
    return ReplicaSelector(Placement.from_dict({"services": {"svc": {"replicas": {"dns": "svc.mesh.test:50061"}}},
                                                "placement": {"b": "svc", "c": "svc"}}))


def test_a_service_with_no_member_yet_is_unserved_and_refuses():
    from core.errors import Unavailable

    sel = dns_selector()
    assert sel.members("svc") == () and sel.unserved() == ["svc"]
    with pytest.raises(Unavailable, match="service svc has no replica"):
        sel.choose("r1", B, "gen")


def test_a_joining_replica_is_chosen_once_serving_and_a_retired_one_never_again():
    sel = dns_selector()
    sel.add("svc", B1, is_serving=True)
    sel.add("svc", B2)  # joined, health not yet passed
    assert {sel.choose(f"s{i}", C, "gen").endpoint for i in range(4)} == {B1}
    sel.set_serving(B2, True)
    assert {sel.choose(f"t{i}", C, "gen").endpoint for i in range(4)} == {B1, B2}
    pinned = next(f"p{i}" for i in range(4) if sel.choose(f"p{i}", B, "gen").endpoint == B2)
    sel.retire("svc", B2)
    assert sel.members("svc") == (B1,)
    assert {sel.choose(f"u{i}", C, "gen").endpoint for i in range(4)} == {B1}
    assert sel.choose(pinned, B, "gen").endpoint == B2  # its state stays where it is
    assert B2 in sel.endpoints()
    sel.check_integrity()
    for i in range(4):
        sel.release(f"p{i}")
    assert B2 not in sel.endpoints()  # drained: gone with its last pin
    sel.add("svc", B2, is_serving=True)  # and it may come back
    assert sel.members("svc") == (B1, B2)
    sel.check_integrity()
