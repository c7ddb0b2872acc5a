"""Convolutions whose output row does not depend on the rest of the batch (CPU).

oneDNN picks another convolution kernel for a batch of one than for several, and the
kernels round differently (~1e-7): a codec window's audio then depended on which other
windows the engine batched with it, so scheduling changed the audio. PyTorch's own CPU
kernels are batch-invariant. Measured here: the same time at batch 1, 12-25% slower at
batch 8 (SNAC, Qwen3-Omni code2wav). CUDA kernels are not affected by this switch.
"""
from __future__ import annotations

import torch


def batch_invariant_convs():
    """Context manager: oneDNN off, nothing else of its flags changed (their other
    defaults would set oneDNN's TF32 mode, which warns)."""
    return torch.backends.mkldnn.flags(enabled=False, deterministic=None, allow_tf32=None, fp32_precision=None)
