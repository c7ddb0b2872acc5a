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
equal to what per-output events would have carried; or the batch as it came
(runtime.received_rows), for a reader that only forwards it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.errors import InvalidArgument
from protos.starmesh.v1 import component_pb2 as pb
from runtime.items import NodeError, NodeOutput
from runtime.received_rows import read_rows
from transport.ref_proto import ref_to_proto
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


def outputs_from_proto(m: pb.OutputBatch, where: str, rows: bool = False) -> list:
    """The batch's NodeOutputs, in order (rows: the batch as one ReceivedRows instead); a
    batch that does not hold together fails each request it names (a NodeError naming the
    field), never the stream."""
    try:
        received = read_rows(m, where)
    except InvalidArgument as e:
        return [NodeError(rid, m.node, e.status, f"{where}: {e}") for rid in dict.fromkeys(m.request_ids)]
    return [received] if rows else received.outputs()
