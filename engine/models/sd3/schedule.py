"""The flow-matching sigma schedule per (steps, image size), FlowMatchEulerDiscreteScheduler's.

diffusers' scheduler computes the schedule (shift, dynamic shifting from the image's
token count) exactly as StableDiffusion3Pipeline asks it to; the update itself is ours
(engine.models.sd3.guidance.euler_step), so no scheduler object carries per-request state.
Schedules are cached: every step of every request with the same (steps, size) reads one.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from core.errors import InvalidArgument


@dataclass(frozen=True)
class Schedule:
    timesteps: "torch.Tensor"  # [steps] float32: what the DiT is conditioned on (sigma * 1000)  # noqa: F821
    sigmas: "torch.Tensor"     # [steps + 1] float32, ending at 0  # noqa: F821

    @property
    def num_steps(self) -> int:
        return len(self.timesteps)


class FlowSchedule:
    def __init__(self, scheduler_config: dict, patch_size: int) -> None:
        from diffusers import FlowMatchEulerDiscreteScheduler

        self.scheduler = FlowMatchEulerDiscreteScheduler.from_config(scheduler_config)
        cfg = self.scheduler.config
        unsupported = [k for k in ("stochastic_sampling", "invert_sigmas") if cfg.get(k)]
        if unsupported:
            raise InvalidArgument(f"scheduler config: {unsupported} are not supported by the dit service")
        self.patch_size = patch_size
        self._cached = lru_cache(maxsize=256)(self._compute)

    def get(self, steps: int, latent_hw: tuple[int, int]) -> Schedule:
        """The schedule of `steps` steps for a latent of [h, w] cells."""
        return self._cached(steps, tuple(latent_hw))

    def _compute(self, steps: int, latent_hw: tuple[int, int]) -> Schedule:
        kwargs = {}
        cfg = self.scheduler.config
        if cfg.get("use_dynamic_shifting"):
            from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift

            image_seq_len = (latent_hw[0] // self.patch_size) * (latent_hw[1] // self.patch_size)
            kwargs["mu"] = calculate_shift(image_seq_len, cfg.get("base_image_seq_len", 256),
                                           cfg.get("max_image_seq_len", 4096), cfg.get("base_shift", 0.5),
                                           cfg.get("max_shift", 1.16))
        self.scheduler.set_timesteps(steps, device="cpu", **kwargs)
        return Schedule(self.scheduler.timesteps.clone(), self.scheduler.sigmas.clone())
