"""BAGEL's flow-matching schedule: shifted timesteps and the Euler update.

t runs linspace(1, 0, steps) (fp32), shifted t' = s * t / (1 + (s - 1) * t); the loop
takes steps - 1 Euler updates x <- x - v(x, t'_i) * (t'_i - t'_{i+1}) (the velocity
points from data to noise, so the update subtracts it). Computed in fp32 on the host, as
the reference computes it, so every implementation compares the same floats.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument


@dataclass(frozen=True)
class FlowSchedule:
    timesteps: torch.Tensor  # fp32 [steps - 1]: the flow time of each update
    dts: torch.Tensor        # fp32 [steps - 1]: t'_i - t'_{i+1}

    def __len__(self) -> int:
        return self.timesteps.numel()


def flow_schedule(steps: int, shift: float) -> FlowSchedule:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise InvalidArgument(f"steps must be an integer >= 2, got {steps!r}")
    if not shift > 0:
        raise InvalidArgument(f"shift must be > 0, got {shift!r}")
    t = torch.linspace(1, 0, steps)
    t = shift * t / (1 + (shift - 1) * t)
    return FlowSchedule(t[:-1].clone(), t[:-1] - t[1:])


def euler_step(x: torch.Tensor, velocity: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    """x, velocity [N, d]; dt a 0-d fp32 tensor -> x - velocity * dt."""
    return x - velocity.to(x.dtype) * dt
