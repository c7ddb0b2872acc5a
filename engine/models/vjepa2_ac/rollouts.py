"""What the rollout engine tracks per rollout and what a step hands back."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class BlockSeq:
    """The block accounting engine.kv_pool.KVPool expects of a sequence: its own blocks
    (one per timestep) and how many of its tokens are cached."""

    request_id: str
    block_table: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0


@dataclass
class Rollout:
    """One rollout: context features [T_c, HW, D] (encoder space), per-timestep actions
    and states [T_c + horizon - 1, A]; `horizon` predictions, one per step after its
    prefill. `prefix`: a shared prefix (engine.models.vjepa2_ac.prefix) holding its first
    timesteps; `group`: the request it belongs to (a plan owns many rollouts)."""

    rollout_id: str
    feats: torch.Tensor
    actions: torch.Tensor
    states: torch.Tensor
    horizon: int
    group: str = ""
    prefix: str | None = None
    seq: BlockSeq = None  # type: ignore[assignment]
    num_prefix_steps: int = 0
    num_emitted: int = 0
    last_prediction: torch.Tensor | None = None   # [HW, D], the next timestep's patch features
    is_parked: bool = False
    is_admitted: bool = False                     # its blocks are reserved (engine admission)

    def __post_init__(self) -> None:
        self.group = self.group or self.rollout_id
        self.seq = BlockSeq(self.rollout_id)

    @property
    def num_context(self) -> int:
        return self.feats.shape[0]


@dataclass(frozen=True)
class StepOutput:
    """Prediction `index` (0-based) of a rollout: the features [HW, D] of timestep
    num_context + index."""

    rollout_id: str
    group: str
    index: int
    prediction: torch.Tensor
    is_last: bool


@dataclass(frozen=True)
class RolloutFailed:
    """A rollout the engine dropped (its blocks are back in the pool)."""

    rollout_id: str
    group: str
    error: Exception
