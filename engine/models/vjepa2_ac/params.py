"""A world-model request's params (rollout horizon, CEM planning knobs), parsed once per
node; every bad value is InvalidArgument naming `params.<key>`. Light: no torch import."""
from __future__ import annotations

from dataclasses import dataclass

from core.params import RequestParams, param

MAX_CANDIDATES = 4096


@dataclass(frozen=True)
class WorldParams(RequestParams):
    horizon: int = param(0, min=0, max=1024, help="predicted timesteps; 0: as many as the actions cover "
                                                   "(rollout) or 4 (plan)")
    num_candidates: int = param(64, min=1, max=MAX_CANDIDATES, help="CEM samples per iteration")
    num_iterations: int = param(3, min=1, max=100, help="CEM iterations")
    num_elites: int = param(8, min=1, max=MAX_CANDIDATES, help="CEM candidates the distribution is refit to")
    init_std: float = param(1.0, min=0, exclusive_min=True, help="initial std of the action distribution (the "
                                                                   "gripper's, in the 7-wide pose layout)")
    maxnorm: float = param(0.05, min=0, exclusive_min=True, help="pose layout: initial std and clip of the "
                                                                 "translation deltas")
    momentum_mean: float = param(0.15, min=0, max=1, help="CEM refit: weight of the previous mean")
    momentum_std: float = param(0.15, min=0, max=1, help="CEM refit: weight of the previous std")
    seed: int = param(0, help="seed of the CEM samples")
    share_prefix: bool = param(True, help="candidates read the context's KV blocks, computed once")
