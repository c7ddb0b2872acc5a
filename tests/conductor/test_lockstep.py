"""The conductor's side of a dlo_group: lockstep groups in a placement, padding units so
every rank receives as many lockstep runs, and the models that may use them."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from conductor.lockstep import LockstepPadder
from conductor.placement import Placement
from core.errors import GraphError
from pipelines.sd3.model import sd3_model as text_to_image_model
from pipelines.sd3.model import LOCKSTEP_NODES, placement_dict, served_model, text_to_image_graph
from runtime.items import LOCKSTEP_PAD


@dataclass(frozen=True)
class Target:
    name: str


R0, R1, R2, OTHER = Target("r0"), Target("r1"), Target("r2"), Target("vae")


def test_pads_bring_every_rank_of_a_touched_group_to_the_most_served_one():
    padder = LockstepPadder({"cfg": (R0, R1, R2)}, LOCKSTEP_NODES)
    assert padder.pads([("denoise_cond", R0), ("denoise_uncond", R1), ("combine", R0)]) == [(R2, 1)]
    assert padder.pads([("denoise_cond", R0), ("denoise_uncond", R0)]) == [(R1, 2), (R2, 2)]
    assert padder.pads([("denoise_cond", R0), ("denoise_uncond", R1), ("denoise_cond", R2)]) == []
    assert padder.pads([("combine", R0), ("decode", OTHER), ("denoise_cond", OTHER)]) == []  # no lockstep run
    first, second = padder.pad_item("r", "image_gen"), padder.pad_item("r", "image_gen")
    assert first.node == second.node == LOCKSTEP_PAD and first.iteration != second.iteration
    assert padder.num_pads == 2


def test_placement_lockstep_groups_are_checked():
    data = placement_dict(text_to_image_graph(), "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4",
                          dlo_group=("127.0.0.1:2", "127.0.0.1:4"))
    placement = Placement.from_dict(data)
    assert placement.lockstep_groups == {"dlo": ("dit", "dit_uncond")}
    with pytest.raises(GraphError, match="lockstep group dlo: unknown service nope"):
        Placement.from_dict({**data, "lockstep_groups": {"dlo": ["dit", "nope"]}})
    two = {**data, "services": {**data["services"], "dit": {"replicas": ["127.0.0.1:2", "127.0.0.1:9"]}}}
    with pytest.raises(GraphError, match="service dit has 2 replicas; a rank is one replica"):
        Placement.from_dict(two)
    with pytest.raises(GraphError, match="service dit is in lockstep groups a and b"):
        Placement.from_dict({**data, "lockstep_groups": {"a": ["dit"], "b": ["dit", "dit_uncond"]}})


def test_a_rank_without_placed_nodes_still_joins_the_group():
    model = served_model("sd3", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", dlo_group=("127.0.0.1:2", "127.0.0.1:4"))
    assert model.placement.lockstep_groups == {"dlo": ("dit", "dit_rank1")}
    assert model.placement.services["dit_rank1"].replicas == ("127.0.0.1:4",)
    assert model.lockstep_nodes == frozenset(LOCKSTEP_NODES)


def test_models_on_lockstep_groups_must_name_their_lockstep_runs_and_not_fuse_the_loop():
    from conductor.model import ServedModel

    placement = Placement.from_dict(placement_dict(text_to_image_graph(), "127.0.0.1:1", "127.0.0.1:2",
                                                   "127.0.0.1:3", "127.0.0.1:4",
                                                   dlo_group=("127.0.0.1:2", "127.0.0.1:4")))
    with pytest.raises(ValueError, match="names no lockstep nodes"):
        ServedModel("sd3", text_to_image_graph(), placement)
    with pytest.raises(GraphError, match="fused denoising loop cannot run on a dlo_group"):
        text_to_image_model("sd3", placement, fused=True)
    assert text_to_image_model("sd3", placement).lockstep_nodes == frozenset(LOCKSTEP_NODES)
