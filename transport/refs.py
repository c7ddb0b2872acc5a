"""`TensorRef`: a tensor by value or by reference, as the core sees it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from transport.dtypes import element_size
from core.errors import BadTensorRef


@dataclass(frozen=True)
class InlineLocation:
    data: bytes  # row-major bytes; a bytes object so torch.frombuffer views it without a copy


@dataclass(frozen=True)
class ShmLocation:
    arena: str
    offset: int
    nbytes: int
    lease_id: int
    host_id: str


@dataclass(frozen=True)
class MooncakeLocation:
    session: str  # "host:rpc_port" of the producer's transfer engine
    address: int  # virtual address inside the producer's registered arena
    nbytes: int
    lease_id: int
    arena: str
    host_id: str


@dataclass(frozen=True)
class ConsumedLease:
    """A lease of `arena` that a consumer resolved and has finished with."""

    arena: str
    lease_id: int


Location = Union[InlineLocation, ShmLocation, MooncakeLocation]
MAX_RANK = 64  # torch's limit on dimensions


def _shown(shape: tuple[int, ...]) -> str:
    return str(list(shape)) if len(shape) <= 8 else f"[{', '.join(map(str, shape[:8]))}, ...] ({len(shape)} dims)"


@dataclass(frozen=True)
class TensorRef:
    """dtype name (see transport.dtypes), shape and where the bytes are.

    Invariant (checked at construction): the location holds exactly
    numel * element_size bytes.
    """

    dtype: str
    shape: tuple[int, ...]
    location: Location

    def __post_init__(self) -> None:
        shape = self.shape
        if shape and min(shape) < 0:
            raise BadTensorRef(f"tensor.shape has a negative dimension: {list(shape)}")
        is_ranked = len(shape) <= MAX_RANK  # first: a hostile shape of a million dims is never multiplied out
        numel = math.prod(shape) if is_ranked else 0
        # torch computes strides (the product of the later dims, empty ones included) in
        # int64: past 2^62 such a shape is no tensor, even with a zero dimension.
        strided = numel or (math.prod(max(d, 1) for d in shape) if is_ranked else 0)
        if not is_ranked or strided >= 1 << 62:
            raise BadTensorRef(f"tensor.shape {_shown(shape)} is not a tensor's: more than {MAX_RANK} "
                               "dimensions, or a product of dimensions past 2^62")
        size = element_size(self.dtype)  # raises BadTensorRef for an unknown dtype
        if self.stored_nbytes != numel * size:
            raise BadTensorRef(
                f"tensor.nbytes is {self.stored_nbytes}, but dtype {self.dtype} and shape "
                f"{list(shape)} need {numel * size}"
            )

    @classmethod
    def of_tensor(cls, dtype: str, shape: tuple[int, ...], location: Location) -> "TensorRef":
        """The ref of a tensor this process exports: dtype is the tensor's own (a wire
        dtype: transport.dtypes.from_torch checked it), shape its own and location holds
        exactly its bytes, so the invariant holds by construction and the checks (~1 us,
        paid per streamed item) are skipped. Refs from the wire go through the constructor."""
        ref = object.__new__(cls)
        ref.__dict__.update(dtype=dtype, shape=shape, location=location)  # frozen: no setattr
        return ref

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * element_size(self.dtype)

    @property
    def stored_nbytes(self) -> int:
        loc = self.location
        return len(loc.data) if isinstance(loc, InlineLocation) else loc.nbytes

    @property
    def lease_id(self) -> int | None:
        return None if isinstance(self.location, InlineLocation) else self.location.lease_id

    @property
    def kind(self) -> str:
        return {InlineLocation: "inline", ShmLocation: "shm", MooncakeLocation: "mooncake"}[
            type(self.location)
        ]
