"""BAGEL's classifier-free guidance: which branches a step needs and how they combine.

A step inside the guidance interval (interval[0] < t <= interval[1]) uses the scales;
outside it both are 1. With the text scale <= 1 there is no guidance at all (the image
branch is ignored too); the image branch runs only with its scale > 1. Combining, with
v from `gen`, v_text from `cfg_text`, v_img from `cfg_img` (each [N, d], N latent tokens):

    v_text' = v_text + s_text * (v - v_text)
    renorm "text_channel": v_text' rescaled per token to at most |v| (clamped below by
        renorm_min), then v' = v_img + s_img * (v_text' - v_img) when the image branch runs;
    "global" / "channel": v' = v_img + s_img * (v_text' - v_img) (or v_text'), rescaled to
        at most |v| over the whole request ("global") or per token ("channel"), the factor
        clamped to [renorm_min, 1].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument

RENORM_TYPES = ("global", "channel", "text_channel")
BRANCHES = ("gen", "cfg_text", "cfg_img")
EPS = 1e-8


@dataclass(frozen=True)
class Guidance:
    text_scale: float = 3.0
    img_scale: float = 1.5
    interval: tuple[float, float] = (0.4, 1.0)
    renorm_type: str = "global"
    renorm_min: float = 0.0

    def __post_init__(self) -> None:
        for name in ("text_scale", "img_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise InvalidArgument(f"{name} must be a number >= 0, got {value!r}")
        if isinstance(self.renorm_min, bool) or not isinstance(self.renorm_min, (int, float)) \
                or not 0 <= self.renorm_min <= 1:
            raise InvalidArgument(f"renorm_min must be in [0, 1], got {self.renorm_min!r}")
        lo, hi = self.interval
        if not 0 <= lo <= hi <= 1:
            raise InvalidArgument(f"cfg_interval must satisfy 0 <= start <= end <= 1, got {self.interval!r}")
        if self.renorm_type not in RENORM_TYPES:
            raise InvalidArgument(f"cfg_renorm_type {self.renorm_type!r} is not one of {RENORM_TYPES}")

    def scales_at(self, t: float) -> tuple[float, float]:
        """(text, img) scales of the step at flow time t (fp32 value)."""
        lo, hi = self.interval
        return (self.text_scale, self.img_scale) if lo < t <= hi else (1.0, 1.0)

    def branches_at(self, t: float) -> tuple[str, ...]:
        """The contexts a step at flow time t reads, `gen` first."""
        text, img = self.scales_at(t)
        if text <= 1.0:
            return ("gen",)
        return ("gen", "cfg_text", "cfg_img") if img > 1.0 else ("gen", "cfg_text")

    def combine(self, t: float, v: dict[str, torch.Tensor]) -> torch.Tensor:
        """The step's velocity [N, d] from the branches' velocities (branches_at(t))."""
        text, img = self.scales_at(t)
        if text <= 1.0:
            return v["gen"]
        v_gen, v_text = v["gen"], v["cfg_text"]
        guided = v_text + text * (v_gen - v_text)
        if self.renorm_type == "text_channel":
            guided = guided * _factor(v_gen.norm(dim=-1, keepdim=True), guided.norm(dim=-1, keepdim=True),
                                      self.renorm_min)
            return v["cfg_img"] + img * (guided - v["cfg_img"]) if img > 1.0 else guided
        if img > 1.0:
            guided = v["cfg_img"] + img * (guided - v["cfg_img"])
        if self.renorm_type == "global":
            return guided * _factor(v_gen.norm(), guided.norm(), self.renorm_min)
        return guided * _factor(v_gen.norm(dim=-1, keepdim=True), guided.norm(dim=-1, keepdim=True), self.renorm_min)


def _factor(norm_ref: torch.Tensor, norm: torch.Tensor, renorm_min: float) -> torch.Tensor:
    return (norm_ref / (norm + EPS)).clamp(min=renorm_min, max=1.0)
