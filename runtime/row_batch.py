"""A step's pushes into a component's open loop runs, as one call (the batch contract).

A component that has `push_rows(batch: RowBatch) -> dict[int, Exception]` receives every
entry of a peer's PushBatch that feeds one of its open loop runs in ONE call, the rows
as they arrived (one stacked tensor for all entries, each entry a row range of it), not
one `push(item, tensors)` per entry. It returns the entries it refused (index -> the
error): each fails its own request alone. Raising fails every entry's request. Rows are
read-only and valid only during the call (copy what is kept), as a push's tensors are.
A component without it gets one `push` per entry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RowBatch:
    """Entry i feeds the open run (request_ids[i], nodes[i], iterations[i]) on port
    ports[i] with rows[starts[i]:stops[i]], its first num_context[i] rows left context
    already pushed before; ends[i]: the producer's stream ended with it."""

    request_ids: list[str]
    nodes: list[str]
    iterations: list[tuple[int, ...]]
    ports: list[str]
    rows: Any  # [R, ...] the batch's stacked rows
    starts: list[int]
    stops: list[int]
    num_context: list[int]
    ends: list[bool]

    def __len__(self) -> int:
        return len(self.request_ids)

    def values(self, i: int):
        """Entry i's rows (a view)."""
        return self.rows[self.starts[i]:self.stops[i]]

    def subset(self, indices: list[int]) -> "RowBatch":
        """The entries `indices`, in that order, over the same rows (a co-located host
        hands each of its components its own)."""
        pick = lambda column: [column[i] for i in indices]  # noqa: E731
        return RowBatch(pick(self.request_ids), pick(self.nodes), pick(self.iterations), pick(self.ports), self.rows,
                        pick(self.starts), pick(self.stops), pick(self.num_context), pick(self.ends))


class RowCollector:
    """Gathers one PushBatch's entries for open loop runs; `flush` makes the one call."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows  # the batch's stacked rows (None: no entry has rows)
        self.columns: tuple[list, ...] = ([], [], [], [], [], [], [], [])

    def add(self, push, values) -> None:
        """push: the entry's (identified) PushChunk; values: its runtime.batch_in.BatchRows
        or None for an entry without rows (an end of stream)."""
        start, stop = (values.start, values.stop) if values is not None else (0, 0)
        for column, value in zip(self.columns, (push.request_id, push.node, push.iteration, push.port, start, stop,
                                                push.num_context, push.end_of_stream)):
            column.append(value)

    def flush(self, component: Any) -> list[tuple[int, RowBatch, Exception]]:
        """Calls component.push_rows once; the entries that failed, with the batch."""
        if not self.columns[0]:
            return []
        rid, node, it, port, start, stop, context, end = self.columns
        batch = RowBatch(rid, node, it, port, self.rows, start, stop, context, end)
        try:
            failures = component.push_rows(batch) or {}
        except Exception as e:  # noqa: BLE001 - the call failed as a whole: every entry did
            return [(i, batch, e) for i in range(len(batch))]
        return [(i, batch, e) for i, e in sorted(failures.items())]


def push_each(component: Any, batch: RowBatch) -> dict[int, Exception]:
    """push_rows for a component that only has `push`: one call per entry (a co-located
    host's member without push_rows)."""
    from runtime.items import PushChunk

    failures: dict[int, Exception] = {}
    for i in range(len(batch)):
        has_rows = batch.stops[i] > batch.starts[i]
        push = PushChunk(batch.request_ids[i], batch.nodes[i], batch.ports[i], batch.iterations[i], {}, batch.ends[i],
                         batch.num_context[i])
        try:
            component.push(push, {batch.ports[i]: batch.values(i)} if has_rows else {})
        except Exception as e:  # noqa: BLE001 - fails this entry's request alone
            failures[i] = e
    return failures
