"""One engine step's pushes to one peer, columnar: the wire's PushBatch, as the core sees it.

Entry i is one route's chunk. Its fields are parallel numpy columns (`ENTRY` records):
the route's id, the chunk's stream position, its row count, left context, padding and
end of stream. The rows of every entry travel stacked in ONE tensor `[sum rows, ...]`
and the production times of their new items in one float64 array, so a step's pushes
cost one message, one reference and one export whatever the number of requests in it.

A producer's runtime builds the batches of one step for one peer with `BatchBuilder`
(one batch per tensor signature: entries of different dtypes or trailing shapes cannot
share a stacked tensor). A consumer reads them with numpy views (`row_offsets`,
`new_offsets`); `check` validates the columns against each other before anything is
sliced, since one wrong count would shift every later entry's rows.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from core.errors import InvalidArgument

# One entry's record; little-endian on the wire whatever the host.
ENTRY = np.dtype([("route", "<u8"), ("start", "<u8"), ("rows", "<u4"), ("num_context", "<u4"),
                  ("num_pad", "<u4"), ("flags", "<u4")])
END_OF_STREAM = 1  # flags bit 0
KNOWN_FLAGS = END_OF_STREAM
_ids: dict[str, int] = {}  # token -> route id, memoized: a route's entries name it every step


def route_id(token: str) -> int:
    """The 64-bit id a route's entries carry: a hash of its token, which both ends know
    (the conductor's grant gives it to each). A consumer still binds a route to the first
    stream that pushes on it, so the id is as hard to use unasked as the token."""
    found = _ids.get(token)
    if found is None:
        found = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
        if len(_ids) > 1 << 16:  # bounded: tokens are per request
            _ids.clear()
        _ids[token] = found
    return found


@dataclass(frozen=True)
class PushBatch:
    """entries: [N] ENTRY records; produced_us: [sum(rows - num_context)] float64;
    rows: [sum rows, ...] (a TensorRef on the wire, a tensor once resolved; None when no
    entry has rows). request_ids: each entry's request, producer side only (a batch that
    cannot be sent fails exactly these); received_us: when the consumer read it."""

    entries: np.ndarray
    produced_us: np.ndarray
    rows: Any = None
    request_ids: tuple[str, ...] = field(default=(), compare=False)
    received_us: float = field(default=0.0, compare=False)

    @property
    def num_entries(self) -> int:
        return len(self.entries)

    def row_offsets(self) -> np.ndarray:
        """[N + 1] int64: entry i's rows are rows[off[i]:off[i + 1]] (its context first)."""
        off = np.zeros(len(self.entries) + 1, dtype=np.int64)
        np.cumsum(self.entries["rows"], out=off[1:])
        return off

    def new_offsets(self) -> np.ndarray:
        """[N + 1] int64: entry i's new items were produced at produced_us[off[i]:off[i + 1]]."""
        off = np.zeros(len(self.entries) + 1, dtype=np.int64)
        np.cumsum(self.entries["rows"].astype(np.int64) - self.entries["num_context"], out=off[1:])
        return off


def entries_from_bytes(data: bytes, field_name: str) -> np.ndarray:
    """The entry records of a wire batch (a read-only view of `data`)."""
    if len(data) % ENTRY.itemsize:
        raise InvalidArgument(f"{field_name}.entries: {len(data)} bytes is not a whole number of "
                              f"{ENTRY.itemsize}-byte entries")
    return np.frombuffer(data, dtype=ENTRY)


def produced_from_bytes(data: bytes, field_name: str) -> np.ndarray:
    if len(data) % 8:
        raise InvalidArgument(f"{field_name}.produced_us: {len(data)} bytes is not a whole number of float64")
    return np.frombuffer(data, dtype="<f8")


def check(batch: PushBatch, num_rows: int, field_name: str) -> None:
    """The columns agree with each other and with the stacked rows (num_rows: its dim 0,
    0 when it has none). Raises InvalidArgument naming the field."""
    e = batch.entries
    rows = e["rows"].astype(np.int64)
    if np.any(e["num_context"] > e["rows"]):
        i = int(np.argmax(e["num_context"] > e["rows"]))
        raise InvalidArgument(f"{field_name}.entries[{i}]: num_context {int(e['num_context'][i])} > rows {int(rows[i])}")
    if np.any(e["flags"] & ~np.uint32(KNOWN_FLAGS)):
        i = int(np.argmax(e["flags"] & ~np.uint32(KNOWN_FLAGS)))
        raise InvalidArgument(f"{field_name}.entries[{i}].flags {int(e['flags'][i])}: only bit 0 (end_of_stream) "
                              "is defined")
    if int(rows.sum()) != num_rows:
        raise InvalidArgument(f"{field_name}: the entries take {int(rows.sum())} rows, rows holds {num_rows}")
    num_new = int((rows - e["num_context"]).sum())
    if len(batch.produced_us) != num_new:
        raise InvalidArgument(f"{field_name}.produced_us has {len(batch.produced_us)} times for {num_new} new items")


class BatchBuilder:
    """One engine step's pushes for one peer, stacked at `build` (producer side)."""

    def __init__(self) -> None:
        self._groups: dict[tuple, _Group] = {}
        self._rowless: list = []  # entries without rows (an empty end of stream): join any group

    def add(self, token: str, request_id: str, start: int, num_context: int, num_pad: int, is_end: bool,
            produced_us: tuple[float, ...], tensor) -> None:
        """One chunk of a route: tensor [n, ...] (its num_context leading rows are left
        context) or None for a chunk without items."""
        record = (route_id(token), start, 0 if tensor is None else tensor.shape[0], num_context, num_pad,
                  END_OF_STREAM if is_end else 0)
        if tensor is None:
            self._rowless.append((record, request_id, produced_us))
            return
        key = (tensor.dtype, tuple(tensor.shape[1:]))
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        group.add(record, request_id, produced_us, tensor)

    @property
    def request_ids(self) -> set[str]:
        """Every request with an entry in this step's batches (they fail together if the
        rows cannot be exported)."""
        out = {rid for _, rid, _ in self._rowless}
        for group in self._groups.values():
            out.update(group.request_ids)
        return out

    def build(self, export: Callable[[Any, dict[str, int]], Any]) -> list[PushBatch]:
        """The batches, in signature order; export(stacked rows, {request: shares}) makes
        each one's reference. Entries keep their order within a batch."""
        groups = list(self._groups.values()) or [_Group()]
        for record, request_id, produced in self._rowless:
            groups[0].add(record, request_id, produced, None)
        out = [g.build(export) for g in groups if g.records]
        self._groups, self._rowless = {}, []
        return out


class _Group:
    def __init__(self) -> None:
        self.records: list[tuple] = []
        self.request_ids: list[str] = []
        self.produced: list[float] = []
        self.tensors: list = []
        self.shares: dict[str, int] = {}  # request -> its entries with rows (each acks the lease once)

    def add(self, record: tuple, request_id: str, produced: tuple[float, ...], tensor) -> None:
        self.records.append(record)
        self.request_ids.append(request_id)
        self.produced.extend(produced)
        if tensor is not None:
            self.tensors.append(tensor)
            self.shares[request_id] = self.shares.get(request_id, 0) + 1

    def build(self, export: Callable) -> PushBatch:
        import torch

        entries = np.array(self.records, dtype=ENTRY)
        rows = None
        if self.tensors:
            # [sum rows, ...]; a copy even of one tensor: a consumer in this process (a local
            # peer) gets rows of its own, never a view of the producer's output
            stacked = torch.cat(self.tensors)
            rows = export(stacked, self.shares)
        return PushBatch(entries, np.array(self.produced, dtype="<f8"), rows, tuple(self.request_ids))
