"""One engine step's pushes to one peer, columnar: the wire's PushBatch, as the core sees it.

Entry i is one route's chunk. Its fields are packed records (`RECORD`; as numpy columns,
`ENTRY`): the route's id, the chunk's stream position, its row count, left context,
padding and end of stream. The rows of every entry travel stacked in ONE tensor `[sum rows, ...]`
and the production times of their new items in one float64 array, so a step's pushes
cost one message, one reference and one export whatever the number of requests in it.

A producer's runtime builds the batches of one step for one peer with `BatchBuilder`
(one batch per tensor signature: entries of different dtypes or trailing shapes cannot
share a stacked tensor). A consumer reads the columns in one pass (`layout`), which
checks them against each other before anything is sliced.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from core.errors import InvalidArgument

# One entry's record, little-endian on the wire whatever the host: one layout, read as
# numpy columns (ENTRY) or as Python tuples (RECORD, the consumer's hot path: for the few
# entries of one step, a numpy call costs more than the whole entry).
FIELDS = (("route", "Q"), ("start", "Q"), ("rows", "I"), ("num_context", "I"), ("num_pad", "I"), ("flags", "I"))
ENTRY = np.dtype([(name, "<" + code.replace("Q", "u8").replace("I", "u4")) for name, code in FIELDS])
RECORD = struct.Struct("<" + "".join(code for _, code in FIELDS))
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
    """entries: N packed RECORDs; produced_us: float64 [sum(rows - num_context)];
    rows: [sum rows, ...] (a TensorRef on the wire, a tensor once resolved or between
    engine threads of one process; None when no entry has rows). request_ids: each
    entry's request, producer side only (a batch that cannot be sent fails exactly
    these); received_us: when the consumer read it."""

    entries: bytes
    produced_us: bytes
    rows: Any = None
    request_ids: tuple[str, ...] = field(default=(), compare=False)
    received_us: float = field(default=0.0, compare=False)

    @property
    def num_entries(self) -> int:
        return len(self.entries) // RECORD.size

    def columns(self) -> np.ndarray:
        """The entries as numpy columns ([N] ENTRY records, a read-only view)."""
        return np.frombuffer(self.entries, dtype=ENTRY)

    def route_ids(self) -> list[int]:
        """The routes its whole records name (a batch refused as a whole fails them)."""
        return [r[0] for r in RECORD.iter_unpack(self.entries[:len(self.entries) // RECORD.size * RECORD.size])]


@dataclass(frozen=True)
class Layout:
    """A checked batch, ready to slice: entry i is records[i], its rows
    rows[row_off[i]:row_off[i + 1]], its new items' times produced[new_off[i]:new_off[i + 1]]."""

    records: list[tuple]
    row_off: list[int]
    new_off: list[int]
    produced: tuple[float, ...]


def layout(batch: PushBatch, num_rows: int, field_name: str) -> Layout:
    """Checks the columns against each other and the stacked rows (num_rows: its dim 0,
    0 when it has none), in one pass; raises InvalidArgument naming the field. One wrong
    count would shift every later entry's rows, so nothing is sliced before this."""
    if len(batch.entries) % RECORD.size:
        raise InvalidArgument(f"{field_name}.entries: {len(batch.entries)} bytes is not a whole number of "
                              f"{RECORD.size}-byte entries")
    if len(batch.produced_us) % 8:
        raise InvalidArgument(f"{field_name}.produced_us: {len(batch.produced_us)} bytes is not a whole number "
                              "of float64")
    records = list(RECORD.iter_unpack(batch.entries))
    row_off, new_off = [0], [0]
    for i, (_, _, rows, context, _, flags) in enumerate(records):
        if context > rows:
            raise InvalidArgument(f"{field_name}.entries[{i}]: num_context {context} > rows {rows}")
        if flags & ~KNOWN_FLAGS:
            raise InvalidArgument(f"{field_name}.entries[{i}].flags {flags}: only bit 0 (end_of_stream) is defined")
        row_off.append(row_off[-1] + rows)
        new_off.append(new_off[-1] + rows - context)
    if row_off[-1] != num_rows:
        raise InvalidArgument(f"{field_name}: the entries take {row_off[-1]} rows, rows holds {num_rows}")
    num_times = len(batch.produced_us) // 8
    if num_times != new_off[-1]:
        raise InvalidArgument(f"{field_name}.produced_us has {num_times} times for {new_off[-1]} new items")
    return Layout(records, row_off, new_off, struct.unpack(f"<{num_times}d", batch.produced_us))


class BatchBuilder:
    """One engine step's pushes for one peer, stacked at `build` (producer side)."""

    def __init__(self) -> None:
        self._groups: dict[tuple, _Group] = {}
        self._by_route: dict[int, _Group] = {}  # route id -> the group of its rows this step
        # entries without rows (an empty end of stream): after the rows of their own route
        # when it has some this step (its consumer must see them first), else in any group
        self._rowless: list = []

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
        self._by_route[record[0]] = group

    @property
    def request_ids(self) -> set[str]:
        """Every request with an entry in this step's batches (they fail together if the
        rows cannot be exported)."""
        out = {rid for _, rid, _ in self._rowless}
        for group in self._groups.values():
            out.update(group.request_ids)
        return out

    def build(self, export: Callable[[Any, dict[str, int]], Any], own_rows: bool = True) -> list[PushBatch]:
        """The batches, in signature order; export(stacked rows, {request: shares}) makes
        each one's reference. Entries keep their order within a batch. own_rows: the
        stacked rows never view a producer's output, even for one chunk (a consumer in
        this process keeps them as they are); False when export copies them anyway."""
        groups = list(self._groups.values()) or [_Group()]
        for record, request_id, produced in self._rowless:
            self._by_route.get(record[0], groups[0]).add(record, request_id, produced, None)
        out = [g.build(export, own_rows) for g in groups if g.records]
        self._groups, self._by_route, self._rowless = {}, {}, []
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

    def build(self, export: Callable, own_rows: bool) -> PushBatch:
        import torch

        entries = b"".join(RECORD.pack(*r) for r in self.records)
        rows = None
        if self.tensors:
            one = len(self.tensors) == 1 and not own_rows
            stacked = self.tensors[0] if one else torch.cat(self.tensors)  # [sum rows, ...]
            rows = export(stacked, self.shares)
        return PushBatch(entries, struct.pack(f"<{len(self.produced)}d", *self.produced), rows, tuple(self.request_ids))
