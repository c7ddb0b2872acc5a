"""When a request's media plays: the deadline every component on its path schedules by.

A speech stream's audio position 0 plays at `origin_s` (unix seconds: a wall clock every
host shares); audio at position p seconds is due at origin_s + p. Before the first audio
reaches the client the origin is the request's arrival, so the items that make the first
chunk are due at once; after it, the time the first chunk reached the client; after an
underrun, later by the stall (the player waited). The conductor owns the origin and sends
it with every node run and whenever it moves (a handful of times per request).

A node run's items map to positions: item k of a run (a loop's k-th output, or the k-th
new item of a chunk run's input stream) is media position (first_item + k) * item_s.
`lead_items` moves the deadline earlier by what consumers must gather after it (a talker
frame feeds a chunk of up to C frames that is decoded only once complete).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Pace:
    origin_s: float       # unix seconds at which media position 0 plays
    item_s: float         # media seconds per item of the run (> 0)
    first_item: int = 0   # the run's first item's index in the stream
    lead_items: int = 0   # items consumers need after one before it can play

    def __post_init__(self) -> None:
        if not math.isfinite(self.origin_s):
            raise ValueError(f"pace.origin_s must be finite, got {self.origin_s!r}")
        if not (math.isfinite(self.item_s) and self.item_s > 0):
            raise ValueError(f"pace.item_s must be > 0, got {self.item_s!r}")
        if self.first_item < 0 or self.lead_items < 0:
            raise ValueError(f"pace.first_item ({self.first_item}) and pace.lead_items ({self.lead_items}) "
                             "must be >= 0")

    def due_s(self, k: int = 0) -> float:
        """When the run's item k must exist for playback not to stall (unix seconds)."""
        return self.origin_s + max(0, self.first_item + k - self.lead_items) * self.item_s

    def moved(self, origin_s: float) -> "Pace":
        return replace(self, origin_s=origin_s)

    def starting_at(self, first_item: int) -> "Pace":
        return replace(self, first_item=first_item)


@dataclass(frozen=True)
class NodePace:
    """A model's declaration of how one node's items map to media time (its ServedModel's
    `pacing`): item_s media seconds per item, lead_items gathered after one before it plays."""

    item_s: float
    lead_items: int = 0

    def __post_init__(self) -> None:
        Pace(0.0, self.item_s, 0, self.lead_items)  # the same checks

    def at(self, origin_s: float, first_item: int = 0) -> Pace:
        return Pace(origin_s, self.item_s, first_item, self.lead_items)
