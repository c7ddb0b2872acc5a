"""A stream's outputs of one step, columnar: the wire's OutputBatch.

Outputs a component returned columnar (NodeOutputs: a step's outputs of one node,
stacked) whose entries go only to the client leave as they came: one OutputRows per
stream, one inline reference per port, no object per entry. Any other output is one
NodeOutput (a token, a frame of one request); on a Run stream, consecutive outputs of
one node with the same ports, no metadata and every value inline travel as ONE
OutputBatch event: each port's values stacked into one inline tensor, the entries'
request ids, iterations, production times and row counts as parallel columns. Only
consecutive outputs join (an event of any other kind, or an output that does not fit,
closes the batch), so the stream's order of events is kept exactly. A batch stays under
MAX_BATCH_BYTES, so it never passes a message limit that its outputs each fit.

The reader gets the NodeOutputs back, each value an inline reference to its own rows,
equal to what per-output events would have carried.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.errors import InvalidArgument
from protos.starmesh.v1 import component_pb2 as pb
from runtime.items import NodeError, NodeOutput
from transport.ref_proto import read_ref, ref_to_proto, UnnamedRefError
from transport.refs import InlineLocation, TensorRef

MAX_BATCH_BYTES = 1 << 20  # inline bytes per batch: far below any message limit


@dataclass
class OutputGroup:
    """Consecutive outputs that travel as one OutputBatch (encoding side)."""

    key: tuple
    outputs: list[NodeOutput] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class OutputRows:
    """Outputs of one node for several runs on one stream, exported already stacked: one
    inline reference per port, [N, ...], entry i's value its row i (the step loop's form of
    a component's NodeOutputs bound only for the client). A wire unit of its own."""

    node: str
    request_ids: list[str]
    iterations: list[tuple[int, ...]]  # every entry's path has the same depth
    produced_us: float
    tensors: dict[str, TensorRef]

    @property
    def outputs(self) -> list[NodeOutput]:
        """The NodeOutputs it stands for: what a reader gets back from its OutputBatch."""
        m = pb.OutputBatch()
        rows_to_proto(self, m)
        return outputs_from_proto(m, "outputs")


def rows_to_proto(r: OutputRows, out: pb.OutputBatch) -> None:
    n, depth = len(r.request_ids), len(r.iterations[0]) if r.iterations else 0
    out.node, out.depth = r.node, depth
    out.request_ids.extend(r.request_ids)
    if depth:
        out.iterations = np.array(r.iterations, dtype="<u4").tobytes()
    out.produced_us = np.full(n, r.produced_us, dtype="<f8").tobytes()
    ones = np.ones(n, dtype="<u4").tobytes()
    for port in sorted(r.tensors):
        col = out.columns.add(port=port)
        col.rows = ones
        ref_to_proto(r.tensors[port], col.values)


def _key(ev) -> tuple | None:
    """What outputs of one batch share (node, iteration depth, ports with dtype and
    trailing shape), or None for an event that travels alone."""
    if not isinstance(ev, NodeOutput) or ev.metadata or not ev.tensors:
        return None
    ports = []
    for port, ref in ev.tensors.items():
        if not isinstance(ref, TensorRef) or not isinstance(ref.location, InlineLocation) or not ref.shape:
            return None
        ports.append((port, ref.dtype, ref.shape[1:]))
    return ev.node, len(ev.iteration), tuple(sorted(ports))


def group(events: list) -> list:
    """The events as wire units, in order: lone events, and OutputGroups of two or more."""
    units: list = []
    for ev in events:
        key = _key(ev)
        last = units[-1] if units else None
        size = sum(len(r.location.data) for r in ev.tensors.values()) if key is not None else 0
        if key is not None and isinstance(last, OutputGroup) and last.key == key \
                and last.nbytes + size <= MAX_BATCH_BYTES:
            last.outputs.append(ev)
            last.nbytes += size
        elif key is not None and isinstance(last, NodeOutput) and _key(last) == key:
            units[-1] = OutputGroup(key, [last, ev], size + sum(len(r.location.data) for r in last.tensors.values()))
        else:
            units.append(ev)
    return units


def group_to_proto(g: OutputGroup, out: pb.OutputBatch) -> None:
    outputs = g.outputs
    node, depth, ports = g.key
    out.node, out.depth = node, depth
    out.request_ids.extend([o.request_id for o in outputs])
    if depth:
        out.iterations = np.array([o.iteration for o in outputs], dtype="<u4").tobytes()
    out.produced_us = np.array([o.produced_us for o in outputs], dtype="<f8").tobytes()
    for port, dtype, trailing in ports:
        refs = [o.tensors[port] for o in outputs]
        col = out.columns.add(port=port)
        col.rows = np.array([r.shape[0] for r in refs], dtype="<u4").tobytes()
        stacked = (sum(r.shape[0] for r in refs),) + trailing
        ref_to_proto(TensorRef.of_tensor(dtype, stacked, InlineLocation(b"".join(r.location.data for r in refs))),
                     col.values)


def outputs_from_proto(m: pb.OutputBatch, where: str) -> list:
    """The batch's NodeOutputs, in order; a batch that does not hold together fails each
    request it names (a NodeError naming the field), never the stream."""
    try:
        return _outputs(m, where)
    except InvalidArgument as e:
        return [NodeError(rid, m.node, e.status, f"{where}: {e}") for rid in dict.fromkeys(m.request_ids)]


def _outputs(m: pb.OutputBatch, where: str) -> list[NodeOutput]:
    request_ids, n = list(m.request_ids), len(m.request_ids)
    iterations = _column(m.iterations, "<u4", n * m.depth, f"{where}.iterations").reshape(n, m.depth).tolist()
    produced = _column(m.produced_us, "<f8", n, f"{where}.produced_us").tolist()
    values: dict[str, list] = {}
    for c, col in enumerate(m.columns):
        field_name = f"{where}.columns[{c}]"
        if not col.port or col.port in values:
            raise InvalidArgument(f"{field_name}.port is empty or repeated")
        values[col.port] = _slices(col, n, field_name)
    names = list(values)
    return [NodeOutput(request_ids[i], m.node, {p: values[p][i] for p in names}, tuple(iterations[i]), {},
                       produced[i]) for i in range(n)]


def _column(data: bytes, dtype: str, count: int, field_name: str) -> np.ndarray:
    arr = np.frombuffer(data, dtype=dtype)
    if len(arr) != count:
        raise InvalidArgument(f"{field_name}: {len(arr)} values for {count}")
    return arr


def _slices(col: pb.OutputColumn, n: int, field_name: str) -> list[TensorRef]:
    """Each entry's rows of the column, as an inline reference of its own."""
    try:
        ref = read_ref(col.values)
    except UnnamedRefError as e:
        raise InvalidArgument(f"{field_name}.values{e}") from None
    rows = _column(col.rows, "<u4", n, f"{field_name}.rows")
    if not isinstance(ref.location, InlineLocation) or not ref.shape or int(rows.sum()) != ref.shape[0]:
        raise InvalidArgument(f"{field_name}.values must be inline with the entries' {int(rows.sum())} rows")
    data, trailing = ref.location.data, ref.shape[1:]
    row_bytes = len(data) // ref.shape[0] if ref.shape[0] else 0
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rows, out=off[1:])
    bounds = (off * row_bytes).tolist()
    counts = rows.tolist()
    return [TensorRef.of_tensor(ref.dtype, (counts[i],) + trailing, InlineLocation(data[bounds[i]:bounds[i + 1]]))
            for i in range(n)]
