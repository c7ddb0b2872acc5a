"""The world component driven directly (no gRPC): the protocol of its node runs
(prefill -> parked -> the rollout loop, outputs tagged per iteration, NodeDone),
cancellation, bad input naming the field, and the KV pool back to empty."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument, ResourceExhausted
from runtime.items import NodeDone, NodeOutput, OpenNode
from services.vjepa2_ac.world import WorldComponent
from tests.fixtures import tiny_vjepa2 as tv
from tests.fixtures.threads import one_thread


@pytest.fixture(scope="module")
def world():
    with one_thread():
        yield WorldComponent.from_checkpoint(tv.checkpoint(), num_blocks=64)


def _drain(component, max_steps: int = 200) -> list:
    events = []
    for _ in range(max_steps):
        if not component.has_work():
            break
        with one_thread():
            events += component.step()
    return events


def _features(world, frames) -> torch.Tensor:
    world.open(OpenNode("enc", "encode"), {"frames": frames})
    (out, done) = _drain(world)
    assert isinstance(done, NodeDone)
    return out.tensors["features"]


def test_encode_gives_one_normalized_timestep_per_frame(world):
    feats = _features(world, tv.frames(3))
    assert feats.shape == (3 * tv.NUM_PATCHES, 32)                      # [F * HW, D]
    torch.testing.assert_close(feats.mean(-1), torch.zeros(3 * tv.NUM_PATCHES), atol=1e-5, rtol=0)
    torch.testing.assert_close(feats.var(-1, unbiased=False), torch.ones(3 * tv.NUM_PATCHES), atol=1e-3, rtol=0)


def test_prefill_parks_until_the_rollout_opens(world):
    feats = _features(world, tv.frames(2))
    world.open(OpenNode("r", "prefill", params={"horizon": 3}), {"features": feats, "actions": tv.actions(4),
                                                                 "states": tv.actions(4, seed=2)})
    first = _drain(world)
    assert [type(e) for e in first] == [NodeOutput, NodeDone] and first[0].tensors["prediction"].shape == (16, 32)
    assert not world.has_work() and world.engine.pool.num_used_blocks == 2  # parked, the context KV kept
    world.open(OpenNode("r", "rollout", iteration=(0,)), {})
    rest = _drain(world)
    assert [e.iteration for e in rest if isinstance(e, NodeOutput)] == [(0, 0), (0, 1)]
    assert "done" in rest[-2].tensors and isinstance(rest[-1], NodeDone) and rest[-1].iteration == (0,)
    world.engine.check_integrity()
    assert world.engine.pool.num_used_blocks == 0


def test_horizon_one_ends_the_loop_without_iterations(world):
    feats = _features(world, tv.frames(1))
    world.open(OpenNode("h1", "prefill", params={"horizon": 1}), {"features": feats, "actions": tv.actions(1),
                                                                  "states": tv.actions(1)})
    assert len(_drain(world)) == 2
    world.open(OpenNode("h1", "rollout"), {})
    assert [type(e) for e in _drain(world)] == [NodeDone]
    assert world.engine.pool.num_used_blocks == 0


def test_cancel_while_parked_frees_the_blocks(world):
    feats = _features(world, tv.frames(2))
    world.open(OpenNode("c", "prefill"), {"features": feats, "actions": tv.actions(6), "states": tv.actions(6)})
    _drain(world)
    assert world.engine.pool.num_used_blocks == 2
    world.cancel("c")
    world.engine.check_integrity()
    assert world.engine.pool.num_used_blocks == 0 and not world.runs


def test_a_rollout_bigger_than_the_pool_fails_at_open(world):
    feats = _features(world, tv.frames(2)).repeat(8, 1)   # 16 context timesteps, 8 blocks in the pool
    small = WorldComponent(world.encoder, world.predictor, type(world.engine.config)(num_blocks=8))
    with pytest.raises(ResourceExhausted, match="needs 16 KV blocks"):
        small.open(OpenNode("big", "prefill", params={"horizon": 1}), {"features": feats, "actions": tv.actions(16),
                                                                       "states": tv.actions(16)})
    small.engine.check_integrity()
    assert small.engine.pool.num_used_blocks == 0 and not small.runs and not small.has_work()


@pytest.mark.parametrize("node, inputs, field", [
    ("encode", {"frames": torch.zeros(4, 3, 32, 32)}, "inputs.frames"),
    ("encode", {}, "frames"),
    ("encode", {"frames": torch.zeros(17, 3, 64, 64)}, "inputs.frames"),   # past the 16 positions
    ("encode", {"frames": torch.zeros(0, 3, 64, 64)}, "inputs.frames"),
    ("prefill", {"features": torch.zeros(5, 32), "actions": torch.zeros(4, 7), "states": torch.zeros(4, 7)},
     "inputs.features"),
    ("plan", {"features": torch.zeros(32, 32), "goal_features": torch.zeros(16, 32), "actions": torch.zeros(1, 6),
              "states": torch.zeros(2, 7)}, "inputs.actions"),
    ("nope", {}, "open.node"),
])
def test_bad_input_names_the_field(world, node, inputs, field):
    with pytest.raises(InvalidArgument, match=field.replace(".", r"\.")):
        world.open(OpenNode("bad", node), inputs)
    assert world.engine.pool.num_used_blocks == 0


def test_clip_encoding_takes_whole_tubelets(world):
    from engine.models.vjepa2_ac.loop import LoopConfig

    clip = WorldComponent(world.encoder, world.predictor, type(world.engine.config)(num_blocks=8),
                          LoopConfig(frame_encoding="clip"))
    with pytest.raises(InvalidArgument, match=r"inputs\.frames has 3 frames: clip encoding"):
        clip.open(OpenNode("odd", "encode"), {"frames": tv.frames(3)})
    clip.open(OpenNode("even", "encode"), {"frames": tv.frames(4)})
    (out, _) = _drain(clip)
    assert out.tensors["features"].shape == (2 * tv.NUM_PATCHES, 32)   # F / tubelet timesteps
