"""The cyclic garbage collector's view of a long-running service process.

Before it serves, a process imports torch, grpc and protobuf and builds its component:
hundreds of thousands of objects that live as long as it does. CPython's collector
re-walks every one of them at each full collection, and a serving loop allocates fast
enough (dicts, tuples, dataclasses and messages per streamed item) to run one every few
seconds: on the conductor benchmark a fifth of the conductor's CPU went to the collector.

`settle_heap()`, called once the process is built and before it serves, collects what is
garbage already, then freezes the rest (gc.freeze: those objects leave the collector's
generations for good; they are still freed by reference counting), and collects the young
generation less often. Cyclic garbage made while serving is still collected.
"""
from __future__ import annotations

import gc

# Allocations (net of frees) between young-generation collections; CPython's default is
# 700. Per-item objects of a serving loop mostly die young by reference counting, so
# a larger first threshold mainly skips collections that would find nothing.
YOUNG_THRESHOLD = 10_000


def settle_heap(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Collects, freezes what survives and raises the young generation's threshold.
    Only for a process's own startup: frozen objects are never scanned again, so a
    reference cycle among them that later becomes garbage is never freed."""
    if young_threshold < 1:
        raise ValueError(f"young_threshold must be >= 1, got {young_threshold}")
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, older, oldest)
