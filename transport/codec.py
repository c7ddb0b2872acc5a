"""Tensor <-> bytes without surplus copies."""
from __future__ import annotations

import warnings

from core.errors import BadTensorRef
from transport.dtypes import to_torch

# torch.frombuffer over bytes (inline protobuf bytes) warns that the buffer is not
# writable; inputs are read-only by contract. Filtered once here: a catch_warnings block
# per view cost more than the view itself (it resets the process's warning caches).
warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)


def as_host(tensor):
    """Detached CPU tensor (device tensors are staged through host memory)."""
    tensor = tensor.detach()
    return tensor if tensor.device.type == "cpu" else tensor.cpu()


def to_bytes(tensor) -> bytes:
    """Row-major bytes of any tensor: 0-d, empty, non-contiguous and bool included."""
    try:  # a CPU tensor of a numpy dtype that needs no grad: every streamed item (~1.5 us against ~4)
        return tensor.numpy().tobytes()  # C order, whatever the strides
    except (TypeError, RuntimeError):  # on a device, bfloat16, requiring grad, or a conjugate view
        pass
    import torch

    if tensor.device.type == "cpu" and tensor.dtype is not torch.bfloat16:  # numpy has every other wire dtype
        return tensor.detach().numpy().tobytes()  # C order, whatever the strides
    flat = as_host(tensor).contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def copy_into(buffer, tensor) -> None:
    """Copies `tensor` into a writable buffer of exactly its nbytes (one strided copy)."""
    import torch

    if tensor.numel() == 0:
        return
    dst = torch.frombuffer(buffer, dtype=torch.uint8).view(tensor.dtype).view(tensor.shape)
    dst.copy_(as_host(tensor))


def view(buffer, dtype: str, shape: tuple[int, ...]):
    """Zero-copy tensor over `buffer` (bytes, mmap slice or ctypes array).

    A read-only buffer (inline protobuf bytes) yields a tensor that must not be
    written: consumers treat inputs as read-only by contract.
    """
    import torch

    tdtype = to_torch(dtype)
    try:
        if 0 in shape or len(buffer) == 0:
            return torch.empty(shape, dtype=tdtype)
        flat = torch.frombuffer(buffer, dtype=tdtype)  # [len(buffer) / element size]
        if len(shape) == 1 and flat.shape[0] == shape[0]:
            return flat  # already the shape: no view (~2 us a streamed item paid for nothing)
        return flat.view(*shape) if shape else flat.view(shape)
    except (RuntimeError, ValueError) as e:  # bytes that do not fit the shape or the dtype, or too big a shape
        raise BadTensorRef(f"tensor of dtype {dtype} and shape {list(shape)[:8]} over {len(buffer)} bytes: {e}") \
            from None


def inline_ref(tensor):
    """A TensorRef carrying `tensor` by value (what a client without an arena sends)."""
    from transport.dtypes import from_torch
    from transport.refs import InlineLocation, TensorRef

    return TensorRef(from_torch(tensor.dtype), tuple(tensor.shape), InlineLocation(to_bytes(tensor)))
