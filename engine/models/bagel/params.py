"""A BAGEL request's params, parsed once (INVALID_ARGUMENT naming `params.<key>`).

Defaults are upstream's interleaved-inference defaults. The walk is picked by the
request, not by a param: text wanted -> understand; an image wanted from text only ->
generate; with an input image -> edit; `think` decodes a plan first (generate / edit) or
answers with its reasoning (understand). width / height set a generated image's size; an
edit's output has its (resized) input image's size. Light: no torch import.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.context_use import ContextParams
from core.errors import InvalidArgument
from core.params import RequestParams, group, param

MAX_STEPS = 1000
MAX_SIDE = 4096
MAX_NEW_TOKENS = 4096


@dataclass(frozen=True)
class BagelParams(RequestParams):
    steps: int = param(50, min=2, max=MAX_STEPS, help="timesteps of the flow (steps - 1 Euler updates)")
    shift: float = param(3.0, min=0, exclusive_min=True, help="timestep shift s: t' = s t / (1 + (s - 1) t)")
    cfg_text_scale: float = param(3.0, min=0, help="text guidance; <= 1: no guidance at all")
    cfg_img_scale: float = param(1.5, min=0, help="image guidance; <= 1: the image branch is not computed")
    cfg_interval_start: float = param(0.4, min=0, max=1, help="guidance where start < t <= end")
    cfg_interval_end: float = param(1.0, min=0, max=1, help="guidance where start < t <= end")
    cfg_renorm_type: str = param("global", help="global | channel | text_channel")
    cfg_renorm_min: float = param(0.0, min=0, max=1, help="lower clamp of the renorm factor")
    width: int = param(1024, min=1, max=MAX_SIDE, help="generated image width, pixels (multiple of 16)")
    height: int = param(1024, min=1, max=MAX_SIDE, help="generated image height, pixels (multiple of 16)")
    seed: int = param(0, help="seed of the initial noise and of the input image's VAE posterior sample")
    think: bool = param(False, help="decode a plan (or reasoning) before the answer")
    max_new_tokens: int = param(1000, min=1, max=MAX_NEW_TOKENS, help="text tokens decoded at most")
    return_float: bool = param(False, help="also emit the float image before uint8 (fidelity checks)")
    context: ContextParams = group(ContextParams)  # context_id, keep_context (a follow-up continues one)

    def __post_init__(self) -> None:
        super().__post_init__()
        from engine.models.bagel.guidance import RENORM_TYPES

        if self.cfg_renorm_type not in RENORM_TYPES:
            raise InvalidArgument(f"params.cfg_renorm_type must be one of {list(RENORM_TYPES)}, "
                                  f"got {self.cfg_renorm_type!r}")
        if self.cfg_interval_start > self.cfg_interval_end:
            raise InvalidArgument(f"params.cfg_interval_start ({self.cfg_interval_start}) must be <= "
                                  f"params.cfg_interval_end ({self.cfg_interval_end})")

    @property
    def posterior_seed(self) -> int:
        """The seed of the (first) input image's VAE posterior sample."""
        return self.seed + 1

    def guidance(self):
        from engine.models.bagel.guidance import Guidance

        return Guidance(self.cfg_text_scale, self.cfg_img_scale, (self.cfg_interval_start, self.cfg_interval_end),
                        self.cfg_renorm_type, self.cfg_renorm_min)
