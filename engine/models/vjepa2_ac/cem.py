"""The cross-entropy method's sampling distribution and its refit, as the upstream
world model's planner does them, and the states a candidate's actions lead to.

With the 7-wide pose layout (engine.models.vjepa2_ac.poses) a candidate action is a pose
delta: its translation starts at std `maxnorm` and is clipped to [-maxnorm, maxnorm], its
rotation is held at zero, its gripper starts at std `init_std` and is clipped to
[-0.75, 0.75]; states follow by pose composition. With any other action width every
channel is free: std `init_std`, no clipping, and a state is the previous state plus the
previous action. Either way the refit moves the mean and std towards the elites' with
momentum: new = (1 - momentum) * elites' + momentum * old (the elites' std unbiased).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.poses import GRIPPER, POSE_WIDTH, ROTATION, TRANSLATION, compose_pose

GRIPPER_LIMIT = 0.75


@dataclass(frozen=True)
class PlanConfig:
    num_candidates: int = 64
    num_iterations: int = 3
    num_elites: int = 8
    horizon: int = 4
    init_std: float = 1.0
    seed: int = 0
    share_prefix: bool = True
    maxnorm: float = 0.05
    momentum_mean: float = 0.15
    momentum_std: float = 0.15

    def __post_init__(self) -> None:
        for name in ("num_candidates", "num_iterations", "num_elites", "horizon"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"params.{name} must be a positive integer, got {value!r}")
        if self.num_elites > self.num_candidates:
            raise InvalidArgument(f"params.num_elites {self.num_elites} exceeds num_candidates "
                                  f"{self.num_candidates}")
        for name in ("init_std", "maxnorm"):
            if not getattr(self, name) > 0:
                raise InvalidArgument(f"params.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("momentum_mean", "momentum_std"):
            if not 0 <= getattr(self, name) <= 1:
                raise InvalidArgument(f"params.{name} must be in [0, 1], got {getattr(self, name)!r}")


def is_pose(width: int) -> bool:
    return width == POSE_WIDTH


def initial(width: int, config: PlanConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The first distribution: mean and std [H, A]."""
    mean = torch.zeros(config.horizon, width)
    std = torch.full((config.horizon, width), float(config.init_std))
    if is_pose(width):
        std[:, TRANSLATION], std[:, ROTATION] = config.maxnorm, 0.0
    return mean, std


def sample(mean: torch.Tensor, std: torch.Tensor, config: PlanConfig, generator: torch.Generator) -> torch.Tensor:
    """num_candidates action sequences [N, H, A]."""
    x = mean + std * torch.randn(config.num_candidates, *mean.shape, generator=generator)
    if is_pose(mean.shape[-1]):
        x[..., TRANSLATION] = x[..., TRANSLATION].clamp(-config.maxnorm, config.maxnorm)
        x[..., ROTATION] = 0.0
        x[..., GRIPPER] = x[..., GRIPPER].clamp(-GRIPPER_LIMIT, GRIPPER_LIMIT)
    return x


def refit(mean: torch.Tensor, std: torch.Tensor, elites: torch.Tensor,
          config: PlanConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """elites [K, H, A] -> the next mean and std [H, A]."""
    elite_std = elites.std(0) if elites.shape[0] > 1 else torch.zeros_like(mean)
    return ((1 - config.momentum_mean) * elites.mean(0) + config.momentum_mean * mean,
            (1 - config.momentum_std) * elite_std + config.momentum_std * std)


def future_states(state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The state [A] the context ends in and candidate actions [N, H, A] -> the states of
    the timesteps the first H - 1 actions lead to [N, H - 1, A]."""
    out, s = [], state.expand(actions.shape[0], -1)
    for h in range(actions.shape[1] - 1):
        s = compose_pose(s, actions[:, h]) if is_pose(actions.shape[-1]) else s + actions[:, h]
        out.append(s)
    return torch.stack(out, dim=1) if out else actions[:, :0]
