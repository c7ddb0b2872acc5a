"""A component's columnar outputs (NodeOutputs) on the engine thread.

Each entry is the NodeOutput it stands for, and gets what one gets: its routes fed, its
routed inputs answered, its run's client credit spent, its values exported. The entries
that go only to their stream's client (no route takes a port, no service reads one, a
client reads them inline) skip the per-entry object and export: per stream they leave
as ONE OutputRows, each port's rows exported together (one copy into one inline
reference, not one per entry). Every other entry takes the per-output path, in order.

Entries of one request keep their order (one request's entries all take one path: its
run decides it); events of other requests may interleave differently than N separate
NodeOutputs would, which no reader depends on (a request's events are its own).
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from runtime.grpc_status import failure
from runtime.items import NodeOutput, NodeOutputs
from runtime.output_batch import MAX_BATCH_BYTES, OutputRows
from transport.config import CLIENT_HOST


class ColumnarOutputs:
    def __init__(self, table, transport, routed, credits, output: Callable, emit: Callable, fail: Callable) -> None:
        """output(state, NodeOutput, found): the per-output path; emit(stream_id, unit):
        onto the stream's outbox; fail(request_id, node, status, message, iteration): fails
        one run."""
        self.table, self.transport, self.routed, self.credits = table, transport, routed, credits
        self._output, self._emit, self._fail = output, emit, fail

    def handle(self, ev: NodeOutputs) -> None:
        together = self._inline_to_client(ev)
        to_client: dict[tuple[str, int], list[int]] = {}  # (stream, depth) -> entry indices
        rows = None  # port -> the entries' [1, ...] views, cut once at the first entry that needs one
        for i, rid in enumerate(ev.request_ids):
            state = self.table.requests.get(rid)
            if state is None:
                continue  # cancelled or its stream ended meanwhile: nobody to tell
            iteration = ev.iterations[i]
            found = self.table.run_of(rid, ev.node, iteration)
            run = found[1] if found else None
            if together and self._only_to_client(rid, ev, iteration, run if run is not None else state):
                self.routed.answered(rid, ev.node, iteration, ev.tensors, run)
                self.credits.spend(ev.tensors, found)
                to_client.setdefault((state.stream_id, len(iteration)), []).append(i)
            else:
                if rows is None:
                    rows = {port: t.split(1) for port, t in ev.tensors.items()}  # one call, not a slice each
                self._output(state, NodeOutput(rid, ev.node, {p: r[i] for p, r in rows.items()}, iteration), found)
        for (stream_id, _), entries in to_client.items():
            self._send(stream_id, ev, entries)

    def _inline_to_client(self, ev: NodeOutputs) -> bool:
        """Whether the rows, exported for a client, travel inline (not by a lease, which
        belongs to one request)."""
        select = getattr(self.transport, "select", None)  # an in-process target's has none
        if select is None or not ev.tensors:
            return False
        return all(select(t.nbytes, (CLIENT_HOST,)) == "inline" for t in ev.tensors.values())

    def _only_to_client(self, rid: str, ev: NodeOutputs, iteration, known) -> bool:
        """No route takes a port, no service reads one, the client reads every one."""
        if known.consumer_host_ids or not known.client_ports or getattr(known, "quiet_ports", ()):
            return False
        return not self.routed.out.feeds(rid, ev.node, iteration) and all(p in known.client_ports for p in ev.tensors)

    def _send(self, stream_id: str, ev: NodeOutputs, rows: list[int]) -> None:
        """The rows as OutputRows of at most MAX_BATCH_BYTES each (one row may pass it
        alone: the message limit then fails its request, as a lone output's would)."""
        row_bytes = max(1, sum(t.nbytes // max(1, t.shape[0]) for t in ev.tensors.values()))
        per = max(1, MAX_BATCH_BYTES // row_bytes)
        produced = time.time() * 1e6
        for lo in range(0, len(rows), per):
            part = rows[lo:lo + per]
            whole = len(part) == len(ev.request_ids)  # every entry: the tensors as they are
            index = None if whole else torch.tensor(part)
            try:
                refs = {port: self.transport.export(t if whole else t.index_select(0, index),
                                                    request_id=ev.request_ids[part[0]], carrier=stream_id,
                                                    consumer_host_ids=(CLIENT_HOST,))
                        for port, t in ev.tensors.items()}
            except Exception as e:  # noqa: BLE001 - its entries' requests fail, as one output's would
                for i in part:
                    self._fail(ev.request_ids[i], ev.node, *failure(e, f"output {ev.node}"), ev.iterations[i])
                continue
            rids = [ev.request_ids[i] for i in part]
            if len(self.table.scopes):  # local ids go back as the ids the stream named
                rids = [self.table.scopes.wire_for(stream_id, rid) for rid in rids]
            self._emit(stream_id, OutputRows(ev.node, rids, [ev.iterations[i] for i in part], produced, refs))

