"""Band-limited resampling of mono audio (windowed sinc, polyphase), for clips that do not
arrive at the audio tower's 16 kHz.

The rate ratio is reduced to coprime integers (up/down); each output sample is a dot
product of `2 * width + 1` input taps with a Hann-windowed sinc whose cutoff is the lower
of the two Nyquist rates (so downsampling does not alias).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

ZERO_CROSSINGS = 16  # half-width of the kernel, in zero crossings of the lower rate's sinc


def _kernels(up: int, down: int) -> tuple[torch.Tensor, int]:
    """(kernels [up, 2 * width + 1] float64, width): one filter per output phase."""
    cutoff = min(up, down)  # in units of the up-sampled rate / max(up, down)
    width = math.ceil(ZERO_CROSSINGS * down / cutoff)
    taps = torch.arange(-width, width + 1, dtype=torch.float64)[None, :]  # input offsets
    phases = torch.arange(up, dtype=torch.float64)[:, None] * down / up  # output time in input samples
    t = (taps - (phases - torch.floor(phases))) * cutoff / down  # in zero crossings
    window = torch.cos(torch.clamp(t / ZERO_CROSSINGS, -1, 1) * math.pi / 2) ** 2
    return torch.special.sinc(t) * window * cutoff / down, width


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """samples [n] float32 at `rate` Hz -> [ceil(n * target / rate)] float32 at `target` Hz."""
    if rate == target:
        return samples
    g = math.gcd(rate, target)
    up, down = target // g, rate // g
    kernels, width = _kernels(up, down)
    n_out = math.ceil(len(samples) * up / down)
    x = torch.from_numpy(np.asarray(samples, dtype=np.float64))
    x = F.pad(x, (width, width + down + 1))
    starts = (torch.arange(n_out) * down) // up  # first tap's input index (after the left pad)
    phase = torch.arange(n_out) % up
    windows = x.unfold(0, 2 * width + 1, 1)[starts]  # [n_out, 2w + 1]
    return (windows * kernels[phase]).sum(-1).to(torch.float32).numpy()
