"""Which denoising loop a BAGEL deployment gets, from its placement alone: the loop runs
inside the backbone (node denoise) when every guidance branch sits on one service, the
conductor fans out to the branches otherwise; what cannot work is refused, named."""
from __future__ import annotations

import pytest

from conductor.placement import Placement
from core.errors import GraphError
from pipelines.bagel.model import DENOISE_LOOP, bagel_graph, bagel_model, placement_dict


def _placement(backbone_cfg=None, drop=(), **moved) -> Placement:
    spec = placement_dict(bagel_graph("bagel"), "h:1", "h:2", "h:3", backbone_cfg)
    spec["placement"] = {n: s for n, s in spec["placement"].items() if n not in drop} | moved
    return Placement.from_dict(spec)


def test_one_replica_fuses_the_loop_and_two_fan_it_out():
    fused = bagel_model("bagel", _placement())
    assert DENOISE_LOOP in fused.inner_loops
    assert "denoise" in fused.graph.walk_by_name["generate"].node_names
    split = bagel_model("bagel", _placement(backbone_cfg="h:4"))
    assert DENOISE_LOOP not in split.inner_loops
    assert "denoise" not in split.graph.walk_by_name["generate"].node_names


def test_a_file_that_does_not_place_denoise_gets_it_beside_the_branches():
    model = bagel_model("bagel", _placement(drop=("denoise",)))
    assert DENOISE_LOOP in model.inner_loops
    assert model.placement.node_to_service["denoise"] == model.placement.node_to_service["velocity_gen"]


def test_denoise_away_from_the_branches_and_a_fused_loop_over_split_branches_are_refused():
    with pytest.raises(GraphError, match="placement.denoise"):
        bagel_model("bagel", _placement(denoise="encoder"))
    with pytest.raises(GraphError, match="options.fused"):
        bagel_model("bagel", _placement(backbone_cfg="h:4"), fused=True)
    assert DENOISE_LOOP not in bagel_model("bagel", _placement(), fused=False).inner_loops
