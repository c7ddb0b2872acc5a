"""The world service follows the upstream V-JEPA 2-AC world-model loop: per-frame encoding
(each frame repeated to one tubelet), layer-normed features and predictions, a normalized
goal. Checked against a recompute loop built on transformers' VJEPA2Model and cc-vjepa2's
VisionTransformerPredictorAC alone (tests/fixtures/vjepa2_upstream.py), on random models
of two shapes with random LayerNorm affines (one with tubelet 3 and 5-wide actions, one
with tubelet 2 and the 7-wide pose layout): max |ours - upstream| / max |upstream| at
most 1e-4 at every horizon, in fp32, solo and batched."""
from __future__ import annotations

import pytest
import torch

from runtime.items import NodeDone, NodeOutput, OpenNode
from services.vjepa2_ac.world import WorldComponent
from tests.fixtures import vjepa2_upstream as up
from tests.fixtures.threads import one_thread

RTOL = 1e-4
HORIZON = 7


@pytest.fixture(scope="module", params=up.SHAPES, ids=lambda s: s.name)
def case(request, tmp_path_factory):
    shape = request.param
    models = up.build(shape)
    if models is None:
        pytest.skip("cc-vjepa2 (the upstream predictor) is not installed")
    encoder, predictor = models
    directory = up.write_checkpoint(tmp_path_factory.mktemp(shape.name), shape, encoder, predictor)
    return shape, encoder, predictor, str(directory)


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def _drain(component) -> list:
    events = []
    for _ in range(500):
        if not component.has_work():
            return events
        events += component.step()
    raise AssertionError("the component did not settle")


def _inputs(shape: up.Shape, num_frames: int, horizon: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    n = num_frames + horizon - 1
    return (torch.randn(num_frames, 3, shape.crop_size, shape.crop_size, generator=g),
            torch.randn(n, shape.action_dim, generator=g), torch.randn(n, shape.action_dim, generator=g))


def _encode(world, rid: str, frames: torch.Tensor) -> torch.Tensor:
    world.open(OpenNode(rid, "encode"), {"frames": frames})
    (out,) = [e for e in _drain(world) if isinstance(e, NodeOutput)]
    return out.tensors["features"]


def _rollouts(world, cases: dict) -> dict[str, torch.Tensor]:
    """rid -> (frames, actions, states, horizon): every rollout opened, then run together."""
    feats = {rid: _encode(world, rid, frames) for rid, (frames, *_) in cases.items()}
    for rid, (_, actions, states, h) in cases.items():
        world.open(OpenNode(rid, "prefill", params={"horizon": h}),
                   {"features": feats[rid], "actions": actions, "states": states})
    got: dict[str, list] = {rid: [] for rid in cases}
    events = _drain(world)                                  # every prefill's first prediction
    for rid in cases:
        world.open(OpenNode(rid, "rollout", iteration=(0,)), {})
    events += _drain(world)
    for e in events:
        if isinstance(e, NodeOutput):
            got[e.request_id].append(e.tensors["prediction"])
    return {rid: torch.stack(p) for rid, p in got.items()}


def _reference(case, frames, actions, states, horizon) -> torch.Tensor:
    shape, encoder, predictor, _ = case
    with torch.no_grad():
        feats = up.encode(encoder, frames, shape.tubelet_size)
        return up.rollout(predictor, feats, actions[None], states[None], horizon, shape.num_patches)[0]


def test_rollout_equals_the_upstream_loop_at_every_horizon(case):
    shape, _, _, directory = case
    world = WorldComponent.from_checkpoint(directory, num_blocks=64)
    frames, actions, states = _inputs(shape, 3, HORIZON, seed=1)
    got = _rollouts(world, {"r": (frames, actions, states, HORIZON)})["r"]
    ref = _reference(case, frames, actions, states, HORIZON)
    assert got.shape == ref.shape == (HORIZON, shape.num_patches, shape.hidden_size)
    errors = up.relative_errors(got, ref)
    print(f"{shape.name}: max relative error per horizon {[f'{e:.1e}' for e in errors]}")
    assert max(errors) < RTOL, errors
    assert world.engine.pool.num_used_blocks == 0


def test_batched_rollouts_equal_the_upstream_loop(case):
    shape, _, _, directory = case
    world = WorldComponent.from_checkpoint(directory, num_blocks=64)
    cases = {f"b{i}": (*_inputs(shape, f, h, seed=10 + i), h) for i, (f, h) in enumerate([(1, 5), (3, 2), (2, 7),
                                                                                          (3, 1)])}
    got = _rollouts(world, cases)
    for rid, (frames, actions, states, h) in cases.items():
        errors = up.relative_errors(got[rid], _reference(case, frames, actions, states, h))
        assert max(errors) < RTOL, (rid, errors)
    world.engine.check_integrity()
    assert world.engine.pool.num_used_blocks == 0


def test_clip_encoding_is_an_explicit_option(case):
    """clip: the frames as one clip (F / tubelet timesteps), normalized; one frame is the
    same either way."""
    import torch.nn.functional as F

    shape, encoder, _, directory = case
    clip = WorldComponent.from_checkpoint(directory, num_blocks=8, frame_encoding="clip")
    frames = _inputs(shape, 2 * shape.tubelet_size, 1, seed=3)[0]
    with torch.no_grad():
        ref = encoder.get_vision_features(frames[None])[0]              # [2 * HW, D]
    got = _encode(clip, "c", frames)
    assert got.shape == (2 * shape.num_patches, shape.hidden_size)
    assert max(up.relative_errors(got[None], F.layer_norm(ref, (ref.shape[-1],))[None])) < RTOL
    per_frame = WorldComponent.from_checkpoint(directory, num_blocks=8)
    torch.testing.assert_close(_encode(per_frame, "p", frames[:1]), _encode(clip, "c1", frames[:1]),
                               atol=1e-6, rtol=0)


def test_without_normalized_reps_the_loop_is_not_upstreams(case):
    """The random LayerNorm affines make the encoder-side norm visible: turning
    normalize_reps off moves every prediction far from upstream's."""
    shape, _, _, directory = case
    world = WorldComponent.from_checkpoint(directory, num_blocks=64, normalize_reps=False)
    frames, actions, states = _inputs(shape, 3, 2, seed=1)
    got = _rollouts(world, {"n": (frames, actions, states, 2)})["n"]
    assert min(up.relative_errors(got, _reference(case, frames, actions, states, 2))) > 1e-2


def _context_states(shape: up.Shape, num_frames: int, g: torch.Generator) -> torch.Tensor:
    """[T_c, A]; in the pose layout, Euler angles in the canonical range and a gripper in [0, 1]."""
    states = torch.randn(num_frames, shape.action_dim, generator=g)
    if shape.action_dim == 7:
        states[:, 3:6] = torch.rand(num_frames, 3, generator=g) * 2 - 1
        states[:, 6] = torch.rand(num_frames, generator=g)
    return states


def _reference_states(shape: up.Shape, last: torch.Tensor, plan: torch.Tensor) -> torch.Tensor:
    """The states the planned actions [H, A] lead to from `last` [A], [H - 1, A]: pose
    deltas with zero rotation leave a canonical rotation as it is, the gripper is clipped
    to [0, 1]; other widths add."""
    out, s = [], last
    for a in plan[:-1]:
        s = s + a
        if shape.action_dim == 7:
            assert (a[3:6] == 0).all()
            s[6] = s[6].clamp(0, 1)
        out.append(s)
    return torch.stack(out) if out else plan[:0]


def test_plan_energy_is_the_upstream_energy(case):
    """The plan's score is the mean L1 distance between the upstream loop's last
    prediction for the planned actions and the goal's normalized features; the pose
    layout's actions are clipped and carry no rotation."""
    shape, encoder, predictor, directory = case
    world = WorldComponent.from_checkpoint(directory, num_blocks=256)
    g = torch.Generator().manual_seed(21)
    frames = torch.randn(2, 3, shape.crop_size, shape.crop_size, generator=g)
    goal = torch.randn(1, 3, shape.crop_size, shape.crop_size, generator=g)
    actions, states = torch.randn(1, shape.action_dim, generator=g), _context_states(shape, 2, g)
    feats, goal_feats = _encode(world, "pf", frames), _encode(world, "pg", goal)
    params = {"horizon": 3, "num_candidates": 12, "num_iterations": 2, "num_elites": 3, "seed": 4}
    world.open(OpenNode("plan", "plan", params=params),
               {"features": feats, "goal_features": goal_feats, "actions": actions, "states": states})
    (out,) = [e for e in _drain(world) if isinstance(e, NodeOutput)]
    plan, score = out.tensors["actions"], float(out.tensors["score"][0])
    if shape.action_dim == 7:
        assert plan[:, :3].abs().max() <= 0.05 and (plan[:, 3:6] == 0).all() and plan[:, 6].abs().max() <= 0.75
    all_actions = torch.cat([actions, plan])
    all_states = torch.cat([states, _reference_states(shape, states[-1], plan)])
    with torch.no_grad():
        ref_goal = up.encode(encoder, goal, shape.tubelet_size)[0, -shape.num_patches:]
        final = _reference(case, frames, all_actions, all_states, 3)[-1]
    energy = float((final - ref_goal).abs().mean())
    assert score == pytest.approx(energy, rel=RTOL)
    assert world.engine.pool.num_used_blocks == 0
