"""Modules built with shapes only, on torch's meta device, without their random init.

    with meta_device():
        model = Talker(spec)          # every parameter and buffer on "meta"; no memory
    model = model.to_empty(device="cpu")   # then the loader copies the checkpoint's tensors in

A module's __init__ runs its reset_parameters (torch.nn.init.normal_, kaiming_uniform_,
...) even on meta tensors, where there is nothing to draw. Those calls are skipped here:
they only cost time, and the first one (torch's meta kernel of normal_ and uniform_ is a
Python reference wrapped to disable torch.compile) imports torch._dynamo, about 1.5 s of
CPU in every process that loads a model. The loaders overwrite every parameter from the
checkpoint anyway.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

# torch.nn.init's in-place initializers (normal_, uniform_, kaiming_uniform_, zeros_, ...)
_INITIALIZERS = frozenset(getattr(torch.nn.init, name) for name in dir(torch.nn.init)
                          if name.endswith("_") and not name.startswith("_"))


class _SkipInit(TorchFunctionMode):
    """Returns an initializer's tensor untouched; every other function runs as called."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _INITIALIZERS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


@contextlib.contextmanager
def meta_device() -> Iterator[None]:
    """torch.device("meta") with torch.nn.init's initializers skipped (module docstring)."""
    with torch.device("meta"), _SkipInit():
        yield
