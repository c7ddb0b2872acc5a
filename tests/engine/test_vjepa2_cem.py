"""The planner's distribution follows the upstream world model's CEM: in the 7-wide pose
layout, translations start at std maxnorm and are clipped to it, rotations are zero, the
gripper is clipped to 0.75; the refit has momentum; states follow by pose composition
(rotations as matrices, checked here against matrix exponentials of the axis
generators); other action widths are free channels whose states add."""
from __future__ import annotations

import math

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac import cem
from engine.models.vjepa2_ac.cem import PlanConfig
from engine.models.vjepa2_ac.poses import compose_pose, euler_to_matrix, matrix_to_euler


def _axis_rotation(axis: int, angle: torch.Tensor) -> torch.Tensor:
    """exp(angle * G), G = [e_axis]x (G v = e_axis x v), the generator of rotations
    about that axis: [..., 3, 3]."""
    e = torch.eye(3, dtype=torch.float64)[axis]
    g = torch.linalg.cross(e.expand(3, 3), torch.eye(3, dtype=torch.float64)).T    # column k: e x e_k
    return torch.linalg.matrix_exp(angle[..., None, None].double() * g)


def _extrinsic_xyz(angles: torch.Tensor) -> torch.Tensor:
    return _axis_rotation(2, angles[..., 2]) @ _axis_rotation(1, angles[..., 1]) @ _axis_rotation(0, angles[..., 0])


def test_euler_matrices_match_the_axis_rotations():
    angles = (torch.rand(64, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1) * 3
    torch.testing.assert_close(euler_to_matrix(angles), _extrinsic_xyz(angles), atol=1e-12, rtol=0)
    back = matrix_to_euler(euler_to_matrix(angles))
    assert back[:, [0, 2]].abs().max() <= math.pi and back[:, 1].abs().max() <= math.pi / 2
    torch.testing.assert_close(euler_to_matrix(back), _extrinsic_xyz(angles), atol=1e-12, rtol=0)


def test_compose_pose_applies_the_delta_on_the_left():
    g = torch.Generator().manual_seed(1)
    pose, delta = torch.rand(16, 7, generator=g) * 2 - 1, torch.rand(16, 7, generator=g) * 2 - 1
    pose[:, 6] = torch.rand(16, generator=g)
    out = compose_pose(pose, delta)
    torch.testing.assert_close(out[:, :3], pose[:, :3] + delta[:, :3])
    torch.testing.assert_close(out[:, 6], (pose[:, 6] + delta[:, 6]).clamp(0, 1))
    want = _extrinsic_xyz(delta[:, 3:6]) @ _extrinsic_xyz(pose[:, 3:6])
    torch.testing.assert_close(_extrinsic_xyz(out[:, 3:6].double()), want, atol=1e-6, rtol=0)
    still = compose_pose(pose, torch.zeros_like(delta))                  # canonical angles stay as they are
    torch.testing.assert_close(still[:, 3:6], pose[:, 3:6], atol=1e-6, rtol=0)


def test_pose_samples_are_clipped_and_carry_no_rotation():
    config = PlanConfig(num_candidates=256, horizon=3, init_std=1.0, maxnorm=0.05)
    mean, std = cem.initial(7, config)
    assert (std[:, :3] == 0.05).all() and (std[:, 3:6] == 0).all() and (std[:, 6] == 1.0).all()
    x = cem.sample(mean, 10 * std, config, torch.Generator().manual_seed(2))       # wide: clipping bites
    assert x.shape == (256, 3, 7)
    assert x[..., :3].abs().max() == pytest.approx(0.05) and (x[..., 3:6] == 0).all()
    assert x[..., 6].abs().max() == pytest.approx(0.75)


def test_free_action_widths_are_neither_clipped_nor_zeroed():
    config = PlanConfig(num_candidates=256, horizon=2, init_std=2.0)
    mean, std = cem.initial(5, config)
    assert (std == 2.0).all()
    x = cem.sample(mean, std, config, torch.Generator().manual_seed(3))
    assert x.abs().max() > 1.0 and (x != 0).all()
    states = cem.future_states(torch.ones(5), x)
    torch.testing.assert_close(states, 1 + torch.cumsum(x[:, :-1], dim=1))


def test_refit_moves_with_momentum():
    config = PlanConfig(num_elites=3, momentum_mean=0.25, momentum_std=0.5)
    mean, std = torch.ones(4, 7), torch.full((4, 7), 2.0)
    elites = torch.randn(3, 4, 7, generator=torch.Generator().manual_seed(4))
    new_mean, new_std = cem.refit(mean, std, elites, config)
    torch.testing.assert_close(new_mean, 0.75 * elites.mean(0) + 0.25 * mean)
    torch.testing.assert_close(new_std, 0.5 * elites.std(0, unbiased=True) + 0.5 * std)


def test_pose_states_follow_by_composition():
    g = torch.Generator().manual_seed(5)
    state = torch.rand(7, generator=g)
    actions = cem.sample(*cem.initial(7, PlanConfig(horizon=4)), PlanConfig(num_candidates=8, horizon=4), g)
    states = cem.future_states(state, actions)                                    # [8, 3, 7]
    s = state.expand(8, -1)
    for h in range(3):
        s = compose_pose(s, actions[:, h])
        torch.testing.assert_close(states[:, h], s, atol=0, rtol=0)


@pytest.mark.parametrize("field, value", [("maxnorm", 0.0), ("momentum_mean", 1.5), ("momentum_std", -0.1)])
def test_bad_cem_knobs_name_the_field(field, value):
    with pytest.raises(InvalidArgument, match=field):
        PlanConfig(**{field: value})
