"""Extends of several requests' contexts gathered into one forward.

Requests putting their inputs in side by side (several prefills run together) hand their
extends here instead of running each: flush() computes every pending one in one
BagelKV.extend. A context has at most one pending extend: a second one for it (its next
rows read the first's K/V) flushes what is pending first, and so does anything that
reads a context's blocks (a fork), so each context sees the same forwards, row for row,
as it would alone.
"""
from __future__ import annotations

from engine.models.bagel.kv_contexts import BagelKV, KVContext, Rows


class ExtendBatch:
    def __init__(self, kv: BagelKV) -> None:
        self.kv = kv
        self.pending: list[tuple[KVContext, Rows]] = []

    def add(self, items: list[tuple[KVContext, Rows]]) -> None:
        """items' rows go in at the next flush (at once if one of their contexts is pending)."""
        pending = {id(ctx) for ctx, _ in self.pending}
        if any(id(ctx) in pending for ctx, _ in items):
            self.flush()
        self.pending += items

    def flush(self) -> None:
        if self.pending:
            items, self.pending = self.pending, []
            self.kv.extend(items)
