from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    DTYPE_FLOAT32: _ClassVar[DType]
    DTYPE_FLOAT16: _ClassVar[DType]
    DTYPE_BFLOAT16: _ClassVar[DType]
    DTYPE_INT64: _ClassVar[DType]
    DTYPE_INT32: _ClassVar[DType]
    DTYPE_INT16: _ClassVar[DType]
    DTYPE_INT8: _ClassVar[DType]
    DTYPE_UINT8: _ClassVar[DType]
    DTYPE_BOOL: _ClassVar[DType]
DTYPE_UNSPECIFIED: DType
DTYPE_FLOAT32: DType
DTYPE_FLOAT16: DType
DTYPE_BFLOAT16: DType
DTYPE_INT64: DType
DTYPE_INT32: DType
DTYPE_INT16: DType
DTYPE_INT8: DType
DTYPE_UINT8: DType
DTYPE_BOOL: DType

class ShmLocation(_message.Message):
    __slots__ = ("arena", "offset", "nbytes", "lease_id", "host_id")
    ARENA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    arena: str
    offset: int
    nbytes: int
    lease_id: int
    host_id: str
    def __init__(self, arena: _Optional[str] = ..., offset: _Optional[int] = ..., nbytes: _Optional[int] = ..., lease_id: _Optional[int] = ..., host_id: _Optional[str] = ...) -> None: ...

class MooncakeLocation(_message.Message):
    __slots__ = ("session", "address", "nbytes", "lease_id", "arena", "host_id")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    ARENA_FIELD_NUMBER: _ClassVar[int]
    HOST_ID_FIELD_NUMBER: _ClassVar[int]
    session: str
    address: int
    nbytes: int
    lease_id: int
    arena: str
    host_id: str
    def __init__(self, session: _Optional[str] = ..., address: _Optional[int] = ..., nbytes: _Optional[int] = ..., lease_id: _Optional[int] = ..., arena: _Optional[str] = ..., host_id: _Optional[str] = ...) -> None: ...

class TensorRef(_message.Message):
    __slots__ = ("dtype", "shape", "inline_bytes", "shm", "mooncake")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    INLINE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHM_FIELD_NUMBER: _ClassVar[int]
    MOONCAKE_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    inline_bytes: bytes
    shm: ShmLocation
    mooncake: MooncakeLocation
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., inline_bytes: _Optional[bytes] = ..., shm: _Optional[_Union[ShmLocation, _Mapping]] = ..., mooncake: _Optional[_Union[MooncakeLocation, _Mapping]] = ...) -> None: ...

class NamedTensor(_message.Message):
    __slots__ = ("name", "tensor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    tensor: TensorRef
    def __init__(self, name: _Optional[str] = ..., tensor: _Optional[_Union[TensorRef, _Mapping]] = ...) -> None: ...
