"""TensorRef <-> `starmesh.v1.TensorRef` converters (the gRPC edge of transport)."""
from __future__ import annotations

from protos.starmesh.v1 import tensor_pb2 as pb
from core.errors import BadTensorRef
from transport.refs import InlineLocation, MooncakeLocation, ShmLocation, TensorRef

_TO_PB = {
    "float32": pb.DTYPE_FLOAT32,
    "float16": pb.DTYPE_FLOAT16,
    "bfloat16": pb.DTYPE_BFLOAT16,
    "int64": pb.DTYPE_INT64,
    "int32": pb.DTYPE_INT32,
    "int16": pb.DTYPE_INT16,
    "int8": pb.DTYPE_INT8,
    "uint8": pb.DTYPE_UINT8,
    "bool": pb.DTYPE_BOOL,
}
_FROM_PB = {v: k for k, v in _TO_PB.items()}


def inline_to_proto(dtype: str, shape: tuple[int, ...], data: bytes, out: pb.TensorRef) -> None:
    """An inline tensor's message from its parts: what ref_to_proto writes for an inline
    TensorRef, without one (a reader forwarding rows of a batch builds no ref per row)."""
    out.dtype = _TO_PB[dtype]
    out.shape.extend(shape)
    out.inline_bytes = data


def ref_to_proto(ref: TensorRef, out: pb.TensorRef | None = None) -> pb.TensorRef:
    msg = pb.TensorRef() if out is None else out
    loc = ref.location
    if isinstance(loc, InlineLocation):
        inline_to_proto(ref.dtype, ref.shape, loc.data, msg)
        return msg
    msg.dtype = _TO_PB[ref.dtype]
    msg.shape.extend(ref.shape)
    if isinstance(loc, ShmLocation):
        msg.shm.arena, msg.shm.offset, msg.shm.nbytes = loc.arena, loc.offset, loc.nbytes
        msg.shm.lease_id, msg.shm.host_id = loc.lease_id, loc.host_id
    else:
        m = msg.mooncake
        m.session, m.address, m.nbytes, m.lease_id = loc.session, loc.address, loc.nbytes, loc.lease_id
        m.arena, m.host_id = loc.arena, loc.host_id
    return msg


class UnnamedRefError(Exception):
    """A bad TensorRef message, its text without the field: the caller prefixes the
    field's name (building names only for the bad ones keeps the per-item path cheap)."""


def ref_from_proto(msg: pb.TensorRef, field: str = "tensor") -> TensorRef:
    """Validates as it converts; errors name `field` (e.g. "open.inputs[x]")."""
    try:
        return read_ref(msg)
    except UnnamedRefError as e:
        raise BadTensorRef(f"{field}{e}") from None


def read_ref(msg: pb.TensorRef) -> TensorRef:
    """ref_from_proto without a field: raises UnnamedRefError(".dtype: ...")."""
    dtype = _FROM_PB.get(msg.dtype)
    if dtype is None:
        raise UnnamedRefError(f".dtype: unknown dtype value {msg.dtype}")
    which = msg.WhichOneof("location")
    if which == "inline_bytes":  # the common case first: read per streamed item
        loc = InlineLocation(msg.inline_bytes)
    elif which is None:
        raise UnnamedRefError(".location: none of inline_bytes, shm, mooncake is set")
    elif which == "shm":
        s = msg.shm
        if not s.arena:
            raise UnnamedRefError(".shm.arena is empty")
        loc = ShmLocation(s.arena, s.offset, s.nbytes, s.lease_id, s.host_id)
    else:
        m = msg.mooncake
        if not m.session or not m.address:
            raise UnnamedRefError(".mooncake: session and address are required")
        loc = MooncakeLocation(m.session, m.address, m.nbytes, m.lease_id, m.arena, m.host_id)
    try:
        return TensorRef(dtype, tuple(msg.shape[:]), loc)
    except BadTensorRef as e:
        raise UnnamedRefError(f": {e}") from None
