"""The join of the CFG branches and the loop's update: guidance, optional renormalisation,
and one flow-matching Euler step (FlowMatchEulerDiscreteScheduler.step semantics)."""
from __future__ import annotations

import torch


def guide(cond: torch.Tensor, uncond: torch.Tensor, scale: float, renorm: float = 0.0) -> torch.Tensor:
    """Classifier-free guidance u + w (c - u) of the velocity predictions [B, C, h, w].

    renorm > 0: the guided prediction's norm (per sample) is capped at renorm times the
    conditional prediction's norm (a large w otherwise overshoots and saturates)."""
    noise = uncond + scale * (cond - uncond)
    if renorm > 0:
        cond_norm = cond.flatten(1).norm(dim=1)    # [B]
        noise_norm = noise.flatten(1).norm(dim=1)  # [B]
        ratio = (renorm * cond_norm / noise_norm.clamp_min(1e-12)).clamp(max=1.0)
        noise = noise * ratio.view(-1, *([1] * (noise.dim() - 1)))
    return noise


def euler_step(latent: torch.Tensor, velocity: torch.Tensor, sigma: torch.Tensor,
               sigma_next: torch.Tensor) -> torch.Tensor:
    """x_{k+1} = x_k + (sigma_{k+1} - sigma_k) v, computed in fp32 and returned in the
    velocity's dtype, as the scheduler does. latent, velocity: [B, C, h, w]."""
    return (latent.to(torch.float32) + (sigma_next - sigma) * velocity).to(velocity.dtype)
