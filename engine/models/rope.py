"""Rotary position embedding, computed the way transformers does (fp32 angles, cos/sin cast
to the activation dtype, rotate-half layout), so fp32 logits match it exactly.

Supported scalings: none ("default") and Llama 3.1 ("llama3"). The Qwen3-Omni thinker's
multimodal rope (`rotation` of [3, T] positions: time, height, width) takes each
frequency's angle from one axis, interleaved; with all three position ids equal it is
this 1-D rope bit for bit.
"""
from __future__ import annotations

import math

import torch

from engine.model_config import Llama3RopeScaling, ModelConfig


def default_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """[head_dim // 2] fp32 inverse frequencies theta^(-2i/d)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    return 1.0 / (theta ** exponents)


def llama3_inv_freq(inv_freq: torch.Tensor, s: Llama3RopeScaling) -> torch.Tensor:
    """Llama 3.1 scaling: long wavelengths divided by factor, a smooth blend in between."""
    low_freq_wavelen = s.original_max_position / s.low_freq_factor
    high_freq_wavelen = s.original_max_position / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding:
    """cos/sin for a step's positions; shared by all layers of a model.

    Not an nn.Module and holds no buffers, so a model built on the meta device and
    materialized with to_empty() keeps exact frequencies.
    """

    def __init__(self, config: ModelConfig):
        inv_freq = default_inv_freq(config.head_dim, config.rope_theta)
        if config.rope_scaling is not None:
            inv_freq = llama3_inv_freq(inv_freq, config.rope_scaling)
        self._inv_freq = inv_freq  # fp32 [D/2], CPU master copy
        # [D/2] or None; configs of models without multimodal rope (code2wav) lack the field
        self._axis_of_freq = _interleaved_axes(getattr(config, "mrope_section", ()), config.head_dim // 2)
        self._by_device: dict[torch.device, torch.Tensor] = {}

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        if device not in self._by_device:
            self._by_device[device] = self._inv_freq.to(device)
        return self._by_device[device]

    def _freqs(self, positions: torch.Tensor) -> torch.Tensor:
        """positions [T] or [3, T] -> angles [T, D/2] fp32."""
        if positions.dim() == 1:
            return positions[:, None].float() * self.inv_freq(positions.device)
        if self._axis_of_freq is None:
            raise ValueError("3-axis positions for a model without multimodal rope")
        freqs = positions[..., None].float() * self.inv_freq(positions.device)  # [3, T, D/2]
        axis = self._axis_of_freq.to(positions.device)
        return freqs.gather(0, axis.view(1, 1, -1).expand(1, freqs.shape[1], -1))[0]

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] (or [3, T]: multimodal rope) -> (cos, sin), each [T, 1, D] in `dtype`."""
        freqs = self._freqs(positions)  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
        return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]

    def rotation(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] -> (cos, signed sin) for rotate(): each [T, 1, D], the sin's first half negated."""
        cos, sin = self(positions, dtype)
        half = sin.shape[-1] // 2
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _interleaved_axes(section: tuple[int, ...], half: int) -> torch.Tensor | None:
    """[half] long: the axis (0 time, 1 height, 2 width) frequency i takes its angle from.
    Frequencies 1, 4, 7, ... (the first section[1]) are height's, 2, 5, 8, ... (the first
    section[2]) width's, every other one time's."""
    if not section:
        return None
    axis = torch.zeros(half, dtype=torch.int64, device="cpu")
    for a in (1, 2):
        axis[a:3 * section[a]:3] = a
    return axis


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D], cos/sin [T, 1, D] -> [T, H, D]."""
    return x * cos + rotate_half(x) * sin


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """apply_rope with (cos, signed sin) from RotaryEmbedding.rotation: x [T, H, D] -> [T, H, D].

    roll(x, D/2) * signed_sin is rotate_half(x) * sin exactly (negation is exact), in 4
    ops instead of 7: rope runs twice per layer per step."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin
