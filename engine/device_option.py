"""The engine's `device` option ("cpu", "cuda", "cuda:N") and host-to-device copies.

Only torch is imported here (no CUDA initialisation happens on import): validating
"cpu" never touches CUDA, and torch.cuda.is_available() is safe on CPU-only builds.
"""
from __future__ import annotations

import re

import torch

from core.errors import InvalidArgument

_DEVICE = re.compile(r"cpu|cuda(?::(\d+))?")


def resolve_device(spec: object, option: str = "engine.device") -> torch.device:
    """The torch.device a device option names, with an explicit index for CUDA.

    Raises InvalidArgument naming `option` for a malformed value, for CUDA where
    torch.cuda.is_available() is False, or for an index past the visible devices."""
    if isinstance(spec, torch.device):
        spec = str(spec)
    match = _DEVICE.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise InvalidArgument(f"{option} must be 'cpu', 'cuda' or 'cuda:N', got {spec!r}")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InvalidArgument(f"{option} is {spec!r}, but CUDA is not available in this process "
                              f"(torch {torch.__version__}: torch.cuda.is_available() is False); use {option}='cpu'")
    count = torch.cuda.device_count()
    index = int(match.group(1)) if match.group(1) is not None else torch.cuda.current_device()
    if index >= count:
        raise InvalidArgument(f"{option} is {spec!r}, but this process sees {count} CUDA device(s)")
    return torch.device("cuda", index)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`. To CUDA: staged through pinned memory and copied with
    non_blocking=True, so the copy is queued on the current stream and the host goes on
    (torch's caching host allocator keeps the pinned block alive until the copy ran)."""
    if device.type == "cpu" or t.device == device:
        return t
    return t.pin_memory().to(device, non_blocking=True)


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst (on the device, e.g. a CUDA graph's static input) <- src (host), queued like to_device."""
    dst.copy_(src.pin_memory() if dst.device.type == "cuda" else src, non_blocking=True)


def to_host(t: torch.Tensor | None) -> torch.Tensor | None:
    """A device tensor back on the host (blocks until the kernels that write it ran)."""
    return None if t is None else t.cpu()
