"""Tensors in and out of a Generate call, with numpy and without torch.

A request's tensor inputs are numpy arrays, or anything `numpy.asarray` reads (lists,
objects with `__array__`); a torch tensor is read through torch only when the caller
has one (torch is then already loaded: this module never imports it). Outputs come back
as numpy arrays; a bfloat16 output, which numpy has no type for, is widened to float32
(exact: every bfloat16 value is a float32 value).

    named_tensor_proto("frames", np.zeros((4, 3, 64, 64), np.float32), req.inputs.add())
    array = array_of(event.tensor)      # a starmesh.v1.NamedTensor -> numpy array
"""
from __future__ import annotations

from core.errors import InvalidArgument
from transport.dtypes import ELEMENT_SIZES

# numpy dtype names that cross the wire as themselves (bfloat16 has no numpy type)
_NUMPY_WIRE = tuple(name for name in ELEMENT_SIZES if name != "bfloat16")


def is_torch_tensor(value) -> bool:
    """True for a torch tensor, told by its type's module so torch is never imported here."""
    return type(value).__module__.split(".")[0] == "torch"


def tensor_ref(value, field: str):
    """`value` as an inline transport.refs.TensorRef; InvalidArgument naming `field`
    when it is no array or its dtype cannot cross the wire."""
    if is_torch_tensor(value):
        from transport.codec import inline_ref  # torch is loaded: the caller made a tensor

        try:
            return inline_ref(value)
        except InvalidArgument as e:
            raise InvalidArgument(f"{field}: {e}") from None
    return _numpy_ref(value, field)


def _numpy_ref(value, field: str):
    import numpy as np

    from transport.refs import InlineLocation, TensorRef

    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{field}: not an array ({type(value).__name__}: {e})") from None
    name = "bool" if array.dtype == np.bool_ else array.dtype.name
    if name not in _NUMPY_WIRE:
        raise InvalidArgument(f"{field}: dtype {array.dtype} cannot cross the wire; use one of "
                              f"{sorted(_NUMPY_WIRE)} (or a torch bfloat16 tensor)")
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()  # row-major, little-endian
    return TensorRef(name, tuple(int(d) for d in array.shape), InlineLocation(data))


def named_tensor_proto(name: str, value, out):
    """Fills `out` (a starmesh.v1.NamedTensor, e.g. `request.inputs.add()`) with `value`."""
    from transport.ref_proto import ref_to_proto

    out.name = name
    ref_to_proto(tensor_ref(value, f"inputs[{name}]"), out.tensor)
    return out


def array_of(named):
    """A starmesh.v1.NamedTensor's value as a numpy array that owns its bytes; the
    conductor sends a client's tensors by value, so a reference is refused (naming it)."""
    import numpy as np

    from transport.ref_proto import ref_from_proto

    field = f"event.tensor[{named.name}]"
    ref = ref_from_proto(named.tensor, field)
    if ref.kind != "inline":
        raise InvalidArgument(f"{field}: arrived by {ref.kind} reference; a client reads tensors by value")
    if ref.dtype == "bfloat16":  # the high half of a float32: shift into place, exactly
        bits = np.frombuffer(ref.location.data, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(ref.shape)
    return np.frombuffer(ref.location.data, dtype=np.dtype(ref.dtype).newbyteorder("<")).reshape(ref.shape).copy()
