"""A client's tensor checked against what its model declares of the input
(core.input_spec), at the front door, before any of the request travels: the wrong dtype
or rank, negative ids, or past the input's own byte bound is INVALID_ARGUMENT naming it.

    check_input(spec, "inputs[input_ids]", ref, "text")   # ref: a client's inline TensorRef

Why here and not only on the services: a float32 input_ids full of NaN would otherwise
reach a prefill that turns it into a list of floats and fails deep in the engine
(INTERNAL); the conductor sees every client input, so one table per model keeps the
refusals uniform and cheap (dtype and rank are O(1); the sign of ids is one pass over at
most max_input_bytes, off the event loop: conductor.request_intake).
"""
from __future__ import annotations

from core.errors import InvalidArgument
from core.input_spec import KINDS, InputSpec


def check_input(spec: InputSpec, field: str, ref, model: str) -> None:
    """ref: a transport TensorRef held inline (a client's). InvalidArgument naming
    `field` when it is not what `spec` takes."""
    shape = tuple(ref.shape)
    if ref.dtype not in KINDS[spec.kind][0] or len(shape) != spec.rank:
        raise InvalidArgument(f"{field} is {ref.dtype} with shape {list(shape)[:8]}: model {model!r} takes "
                              f"{spec.describe()}")
    if spec.max_bytes and ref.nbytes > spec.max_bytes:
        raise InvalidArgument(f"{field} is {ref.nbytes} bytes, over model {model!r}'s limit of {spec.max_bytes} "
                              f"for this input")
    if spec.kind == "ids" and ref.dtype != "uint8" and ref.numel:
        _check_sign(field, ref)


def _check_sign(field: str, ref) -> None:
    from transport.codec import view

    values = view(ref.location.data, ref.dtype, tuple(ref.shape))  # zero-copy over the request's bytes
    negative = values < 0
    if bool(negative.any()):
        import torch

        at = int(torch.nonzero(negative.reshape(-1))[0])
        raise InvalidArgument(f"{field}[{at}] is {int(values.reshape(-1)[at])}: ids are >= 0")
