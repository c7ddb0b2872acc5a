"""Convolutions whose output row does not depend on the rest of the batch (CPU).

Two CPU backends pick their kernels by batch size, and their kernels round differently
(~1e-7): oneDNN takes another kernel for a batch of one than for several, and NNPACK
takes over at a batch of 16. A codec window's audio then depended on which other
windows the engine batched with it, so scheduling changed the audio. PyTorch's own CPU
kernels are batch-invariant. Measured here: the same time at batch 1, 12-25% slower at
batch 8 (SNAC, Qwen3-Omni code2wav). CUDA kernels are not affected by this switch.
"""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def batch_invariant_convs():
    """Context manager: oneDNN and NNPACK off, nothing else of their flags changed
    (oneDNN's other defaults would set its TF32 mode, which warns)."""
    with torch.backends.mkldnn.flags(enabled=False, deterministic=None, allow_tf32=None, fp32_precision=None), \
            torch.backends.nnpack.flags(enabled=False):
        yield
