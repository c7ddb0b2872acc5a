"""Lockstep rounds and the dlo_group dit replica in this process (a group of one: no
collective): units are counted whatever becomes of them, a padding unit answers
NodeDone, a failed forward breaks the group with an error naming it, the fused loop is
refused, membership needs AllGather offload, and close disables offload before the group
goes. Two real ranks: tests/engine/offload/test_lockstep_group.py, tests/e2e/test_dlo_group.py."""
from __future__ import annotations

import pytest
import torch

from engine.offload import OffloadConfig
from engine.offload.group import DloGroupConfig, LockstepError
from engine.stateless_engine import WorkItem
from cluster.registry import build_component
from services.dit.group_member import GroupMemberDit
from services.dit.lockstep import Lockstep, Unit, plan_batches
from runtime.items import LOCKSTEP_PAD, NodeDone, NodeOutput, OpenNode
from tests.fixtures import tiny_sd3
from core.errors import InvalidArgument

pytestmark = pytest.mark.timeout(120)
SOLO = DloGroupConfig("127.0.0.1:29999", 0, 1, "solo")
ALLGATHER = OffloadConfig(enabled=True, use_allgather=True)


class FakeGroup:
    """A rank whose peers queue `peer_units` and batch into `peer_batches` each round."""

    def __init__(self, peer_units: int = 1 << 30, peer_batches: int = 0) -> None:
        self.config = SOLO
        self.peer = {"min": peer_units, "max": peer_batches}

    def agree(self, value: int, op: str) -> int:
        return min(value, self.peer[op]) if op == "min" else max(value, self.peer[op])


def unit(rid: str, key=None, cancelled: bool = False) -> Unit:
    item = None if key is None else WorkItem(rid, key, torch.tensor([1.0]))
    return Unit(OpenNode(rid, "denoise_cond"), item, cancelled)


def test_batches_follow_the_engine_and_rounds_pad_to_the_peers_forwards():
    units = [unit("a", "k"), unit("b", "j"), unit("c", "k"), unit("d", "k")]
    assert [[u.open.request_id for u in b] for b in plan_batches(units, 2)] == [["a", "c"], ["b"], ["d"]]
    pads = []
    lockstep = Lockstep(FakeGroup(peer_units=3, peer_batches=3), 2, lambda items: [i.payload for i in items],
                        lambda: pads.append(1))
    for u in [unit("a", "k"), unit("p"), unit("c", "k", cancelled=True), unit("d", "k")]:
        lockstep.add(u, is_pad=u.item is None)
    results = lockstep.round()  # takes 3 (the peer's count): one live item, one batch; the peer has 3
    assert [(u.open.request_id, out is not None) for u, out, _ in results] == [("a", True), ("p", False),
                                                                                ("c", False)]
    assert lockstep.stats.forwards == 1 and lockstep.stats.padding_forwards == 2 == len(pads)
    assert len(lockstep.units) == 1 and lockstep.stats.padding_units == 1


def test_a_failed_forward_breaks_the_group_for_good_naming_it():
    def boom(items):
        raise RuntimeError("kernel exploded")

    lockstep = Lockstep(FakeGroup(peer_units=1), 8, boom, lambda: None)
    lockstep.add(unit("a", "k"))
    lockstep.add(unit("b", "k"))
    results = lockstep.round()  # takes one; the queued one fails too: it can never pair any more
    assert [u.open.request_id for u, _, _ in results] == ["a", "b"]
    assert all(isinstance(e, LockstepError) and "dlo_group 'solo' rank 0/1" in str(e) for _, _, e in results)
    assert "kernel exploded" in str(results[0][2]) and not lockstep.has_units
    with pytest.raises(LockstepError, match="is broken"):
        lockstep.check_usable()


@pytest.fixture(scope="module")
def member():
    with tiny_sd3.one_thread():
        comp = build_component("dit", checkpoint=tiny_sd3.checkpoint(), offload=ALLGATHER, dlo_group=SOLO)
        yield comp
        comp.close()


def test_a_group_of_one_is_a_member_without_collectives(member):
    assert isinstance(member, GroupMemberDit) and LOCKSTEP_PAD in member.nodes
    load = member.load()
    assert load["dlo_world"] == 1 and load["dlo_allgather"] == 0  # a group of one stays rank-local
    with pytest.raises(InvalidArgument, match="denoise_loop.*lockstep"):
        member.open(OpenNode("r", "denoise_loop", iteration=()), {})


def test_pads_answer_done_and_refused_or_bad_branches_still_count(member):
    before = member.lockstep.stats.units
    member.open(OpenNode("p", LOCKSTEP_PAD, iteration=(5,)), {})
    member.refused(OpenNode("q", "denoise_uncond", iteration=(0,)))  # refused before open: a dead unit
    with pytest.raises(InvalidArgument, match="latent"):
        member.open(OpenNode("bad", "denoise_cond", iteration=(0,), params=dict(tiny_sd3.BASE)), {})
    assert member.lockstep.stats.units == before + 3 and member.has_work()
    events = member.step()
    assert [type(e) for e in events] == [NodeDone] and events[0].node == LOCKSTEP_PAD
    assert not member.has_work() and member.lockstep.stats.forwards == 0


def test_a_branch_runs_in_a_round(member):
    params = dict(tiny_sd3.BASE)
    latent = torch.randn(1, 4, 8, 8)
    inputs = {"latent": latent, "embeds": torch.randn(1, 5, 64), "pooled": torch.randn(1, 48)}
    member.open(OpenNode("r", "denoise_cond", iteration=(0,), params=params), inputs)
    events = member.step()
    assert [type(e) for e in events] == [NodeOutput, NodeDone] and events[0].tensors["noise"].shape == latent.shape
    forwards = member.lockstep.stats.forwards
    member.open(OpenNode("gone", "denoise_cond", iteration=(0,), params=params), inputs)
    member.cancel("gone")  # its place stays (a peer counted its own), its work does not run
    assert member.has_work() and member.step() == [] and not member.has_work()
    assert member.lockstep.stats.forwards == forwards


def test_membership_needs_allgather_offload():
    with pytest.raises(InvalidArgument, match="offload.use_allgather"):
        build_component("dit", checkpoint=tiny_sd3.checkpoint(), offload=OffloadConfig(enabled=True), dlo_group=SOLO)


def test_close_disables_offload_then_leaves_the_group():
    with tiny_sd3.one_thread():
        comp = build_component("dit", checkpoint=tiny_sd3.checkpoint(), offload=ALLGATHER, dlo_group=SOLO)
    backend = comp.model.transformer.offload_backend
    assert backend.enabled
    comp.close()
    assert not backend.enabled and comp.lockstep.is_closed and not comp.group.is_open
    with pytest.raises(LockstepError, match="closed"):
        comp.lockstep.check_usable()
