"""PushBatch <-> starmesh.v1.PushBatch at the gRPC edge (runtime.push_batch is the core's)."""
from __future__ import annotations

from core.errors import BadTensorRef
from protos.starmesh.v1 import component_pb2 as pb
from runtime.push_batch import PushBatch
from transport.ref_proto import UnnamedRefError, read_ref, ref_to_proto


def batch_to_proto(batch: PushBatch, out: pb.PushBatch) -> None:
    """`batch.rows` must already be an exported TensorRef (or None)."""
    out.entries = batch.entries
    out.produced_us = batch.produced_us
    if batch.rows is not None:
        ref_to_proto(batch.rows, out.rows)


def batch_from_proto(m: pb.PushBatch, field: str, received_us: float = 0.0) -> PushBatch:
    """The packed columns as they came; the consumer checks them against each other and
    the rows (runtime.push_batch.layout) once it holds the rows."""
    rows = None
    if m.HasField("rows"):
        try:
            rows = read_ref(m.rows)
        except UnnamedRefError as e:
            raise BadTensorRef(f"{field}.rows{e}") from None
    return PushBatch(m.entries, m.produced_us, rows, received_us=received_us)
