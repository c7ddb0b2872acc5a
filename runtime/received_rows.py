"""An OutputBatch as its reader holds it: columns, no object per entry.

    rows = read_rows(batch, "events[3].outputs")   # InvalidArgument naming the field
    rows.by_request()        # request id -> its entries, in order
    rows.output(i)           # entry i as the NodeOutput it stands for
    RowsView(rows.columns["z"], [0, 2])   # some entries of one port, as one value

Entry i is request_ids[i]'s output of `node` at iterations[i]; each port's values are
rows of one inline buffer, entry i's the rows [offsets[i], offsets[i + 1]). A reader that
only forwards outputs (the conductor, for a node whose outputs only its client reads)
builds nothing per entry but what it sends; any other reader asks for the NodeOutputs.
"""
from __future__ import annotations

import numpy as np

from core.errors import InvalidArgument
from protos.starmesh.v1 import component_pb2 as pb
from runtime.items import NodeOutput
from transport.ref_proto import UnnamedRefError, read_ref
from transport.refs import InlineLocation, TensorRef


class Column:
    """One port's values: `data` holds every entry's rows, entry i's bytes are
    data[bounds[i]:bounds[i + 1]] and its shape (counts[i], *trailing)."""

    __slots__ = ("dtype", "trailing", "data", "bounds", "counts")

    def __init__(self, dtype: str, trailing: tuple[int, ...], data: bytes, bounds: list[int],
                 counts: list[int]) -> None:
        self.dtype, self.trailing, self.data, self.bounds, self.counts = dtype, trailing, data, bounds, counts

    def take(self, entries: list[int]) -> "Column":
        """A column of these entries only, in this order (their bytes copied)."""
        bounds, counts = self.bounds, self.counts
        parts = [self.data[bounds[i]:bounds[i + 1]] for i in entries]
        offsets = [0]
        for part in parts:
            offsets.append(offsets[-1] + len(part))
        return Column(self.dtype, self.trailing, b"".join(parts), offsets, [counts[i] for i in entries])

    def ref(self, i: int) -> TensorRef:
        """Entry i's value, an inline reference of its own (a copy of its bytes)."""
        bounds = self.bounds
        return TensorRef.of_tensor(self.dtype, (self.counts[i],) + self.trailing,
                                   InlineLocation(self.data[bounds[i]:bounds[i + 1]]))


class ReceivedRows:
    """One OutputBatch as read (see the module docstring)."""

    __slots__ = ("node", "request_ids", "iterations", "produced_us", "columns")

    def __init__(self, node: str, request_ids: list[str], iterations: list[tuple[int, ...]],
                 produced_us: list[float], columns: dict[str, Column]) -> None:
        self.node, self.request_ids, self.iterations = node, request_ids, iterations
        self.produced_us, self.columns = produced_us, columns

    def __len__(self) -> int:
        return len(self.request_ids)

    def by_request(self) -> dict[str, list[int]]:
        """Each request's entries, in the batch's order (requests in order of first entry)."""
        out: dict[str, list[int]] = {}
        for i, rid in enumerate(self.request_ids):
            entries = out.get(rid)
            if entries is None:
                out[rid] = [i]
            else:
                entries.append(i)
        return out

    def output(self, i: int) -> NodeOutput:
        return NodeOutput(self.request_ids[i], self.node, {p: c.ref(i) for p, c in self.columns.items()},
                          self.iterations[i], {}, self.produced_us[i])

    def outputs(self) -> list[NodeOutput]:
        return [self.output(i) for i in range(len(self.request_ids))]


COMPACT_BYTES = 64 << 10  # a view of fewer than all entries of a larger column holds a copy of its own


class RowsView:
    """Some entries of one Column, in order: several outputs of one port as one value
    (what the conductor queues for a client instead of a value per entry).

    Invariant: a view holds at most its own entries' bytes, or a column of at most
    COMPACT_BYTES: a slow client's queued views never keep whole batches of other
    requests alive (their entries are copied out, as the per-entry path copies each)."""

    __slots__ = ("column", "entries")

    def __init__(self, column: Column, entries: list[int]) -> None:
        if len(column.data) > COMPACT_BYTES and len(entries) < len(column.counts):
            column, entries = column.take(entries), list(range(len(entries)))
        self.column, self.entries = column, entries

    def __len__(self) -> int:
        return len(self.entries)

    def refs(self) -> list[TensorRef]:
        """Each entry's value, as the per-entry path would have carried it."""
        return [self.column.ref(i) for i in self.entries]


def read_rows(m: pb.OutputBatch, where: str) -> ReceivedRows:
    """The batch, checked whole: a column that does not hold together raises
    InvalidArgument naming its field."""
    n = len(m.request_ids)
    iterations = _array(m.iterations, "<u4", n * m.depth, f"{where}.iterations").reshape(n, m.depth).tolist()
    produced = _array(m.produced_us, "<f8", n, f"{where}.produced_us").tolist()
    columns: dict[str, Column] = {}
    for c, col in enumerate(m.columns):
        field_name = f"{where}.columns[{c}]"
        if not col.port or col.port in columns:
            raise InvalidArgument(f"{field_name}.port is empty or repeated")
        columns[col.port] = _column(col, n, field_name)
    return ReceivedRows(m.node, list(m.request_ids), [tuple(it) for it in iterations], produced, columns)


def _array(data: bytes, dtype: str, count: int, field_name: str) -> np.ndarray:
    arr = np.frombuffer(data, dtype=dtype)
    if len(arr) != count:
        raise InvalidArgument(f"{field_name}: {len(arr)} values for {count}")
    return arr


def _column(col: pb.OutputColumn, n: int, field_name: str) -> Column:
    try:
        ref = read_ref(col.values)
    except UnnamedRefError as e:
        raise InvalidArgument(f"{field_name}.values{e}") from None
    rows = _array(col.rows, "<u4", n, f"{field_name}.rows")
    if not isinstance(ref.location, InlineLocation) or not ref.shape or int(rows.sum()) != ref.shape[0]:
        raise InvalidArgument(f"{field_name}.values must be inline with the entries' {int(rows.sum())} rows")
    data = ref.location.data
    row_bytes = len(data) // ref.shape[0] if ref.shape[0] else 0
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rows, out=off[1:])
    return Column(ref.dtype, tuple(ref.shape[1:]), data, (off * row_bytes).tolist(), rows.tolist())
