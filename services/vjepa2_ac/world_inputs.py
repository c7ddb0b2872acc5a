"""A world-model node run's tensors, checked against the checkpoint (InvalidArgument
naming the field) and turned into what the rollout engine takes."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.config import EncoderConfig, PredictorConfig
from engine.models.vjepa2_ac.params import WorldParams
from engine.models.vjepa2_ac.planner import PlanConfig
from engine.models.vjepa2_ac.validation import check_horizon, check_steps, rollout_horizon

DEFAULT_PLAN_HORIZON = 4


def tensor(inputs: dict, name: str, node: str) -> torch.Tensor:
    if name not in inputs:
        raise InvalidArgument(f"open.inputs: node {node} needs {name}")
    return inputs[name].to(torch.float32)


def features(inputs: dict, name: str, node: str, enc: EncoderConfig, pred: PredictorConfig) -> torch.Tensor:
    """Encoder features [T * HW, D] (as encode emits them) -> [T, HW, D]."""
    x = tensor(inputs, name, node)
    hw = pred.num_patches
    if x.ndim != 2 or x.shape[1] != enc.hidden_size or x.shape[0] % hw or x.shape[0] == 0:
        raise InvalidArgument(f"inputs.{name} must be [timesteps * {hw}, {enc.hidden_size}], got {list(x.shape)}")
    return x.view(-1, hw, enc.hidden_size)


@dataclass(frozen=True)
class RolloutInputs:
    feats: torch.Tensor     # [T_c, HW, D]
    actions: torch.Tensor   # [T_c + H - 1, A]
    states: torch.Tensor
    horizon: int


def rollout_inputs(inputs: dict, node: str, params: WorldParams, enc: EncoderConfig,
                   pred: PredictorConfig) -> RolloutInputs:
    feats = features(inputs, "features", node, enc, pred)
    t_c = feats.shape[0]
    actions, states = tensor(inputs, "actions", node), tensor(inputs, "states", node)
    check_steps("actions", actions, pred, 1)
    horizon = rollout_horizon(params.horizon, t_c, actions.shape[0])
    check_horizon(horizon, t_c, pred)
    check_steps("actions", actions, pred, t_c + horizon - 1)
    check_steps("states", states, pred, t_c + horizon - 1)
    n = t_c + horizon - 1
    return RolloutInputs(feats, actions[:n], states[:n], horizon)


@dataclass(frozen=True)
class PlanInputs:
    feats: torch.Tensor     # [T_c, HW, D]
    actions: torch.Tensor   # [T_c - 1, A]
    states: torch.Tensor    # [T_c, A]
    goal: torch.Tensor      # [HW, D]
    config: PlanConfig


def plan_inputs(inputs: dict, node: str, params: WorldParams, enc: EncoderConfig,
                pred: PredictorConfig) -> PlanInputs:
    feats = features(inputs, "features", node, enc, pred)
    goal = features(inputs, "goal_features", node, enc, pred)[-1]  # the goal's last timestep
    t_c = feats.shape[0]
    actions, states = tensor(inputs, "actions", node), tensor(inputs, "states", node)
    check_steps("actions", actions, pred, t_c - 1)
    check_steps("states", states, pred, t_c)
    horizon = params.horizon or DEFAULT_PLAN_HORIZON
    check_horizon(horizon, t_c, pred)
    config = PlanConfig(num_candidates=params.num_candidates, num_iterations=params.num_iterations,
                        num_elites=params.num_elites, horizon=horizon, init_std=params.init_std,
                        seed=params.seed, share_prefix=params.share_prefix, maxnorm=params.maxnorm,
                        momentum_mean=params.momentum_mean, momentum_std=params.momentum_std)
    return PlanInputs(feats, actions[: t_c - 1], states[:t_c], goal, config)
