"""The dtypes that may cross the wire, by name; torch is imported lazily."""
from __future__ import annotations

from core.errors import BadTensorRef

# name -> element size in bytes. Names match torch's (torch.float32 -> "float32").
ELEMENT_SIZES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def element_size(name: str) -> int:
    try:
        return ELEMENT_SIZES[name]
    except KeyError:
        raise BadTensorRef(f"tensor.dtype {name!r} is not supported; use one of {sorted(ELEMENT_SIZES)}") from None


# Both directions, filled on first use: every tensor crossing a port asks (a lookup here,
# against ~0.5 us for str(dtype) and the checks).
_TORCH: dict = {}
_NAMES: dict = {}


def to_torch(name: str):
    dtype = _TORCH.get(name)
    if dtype is None:
        import torch

        element_size(name)
        dtype = _TORCH[name] = getattr(torch, name)
    return dtype


def from_torch(dtype) -> str:
    name = _NAMES.get(dtype)
    if name is None:
        name = str(dtype).removeprefix("torch.")
        element_size(name)
        _NAMES[dtype] = name
    return name
