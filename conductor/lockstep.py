"""Lockstep groups on the conductor: every rank of a group receives as many lockstep
units as every other (docs/offload.md, "dlo_group").

The replicas of a dlo_group gather their offloaded blocks from each other, so each
DiT forward on one rank must pair with one on every other rank. A run of a lockstep
node (ServedModel.lockstep_nodes: the denoising branches) on a group member is one
*unit* of its rank. After each pump of a request (the dispatches that became ready
together: the branches of one denoising step), every rank of a touched group that got
fewer units than the group's most-served rank gets padding units (LOCKSTEP_PAD) for
the difference, in the same flush: a request without a branch for some rank (both
branches on one replica, a walk with fewer branches than ranks) still steps every
rank. The ranks then pair their units in rounds (services.dit.lockstep).
"""
from __future__ import annotations

import itertools
from typing import Any, Iterable, Mapping

from runtime.items import LOCKSTEP_PAD, OpenNode


class LockstepPadder:
    def __init__(self, groups: Mapping[str, tuple[Any, ...]], nodes: Iterable[str]) -> None:
        """groups: name -> the targets of its ranks, in rank order; nodes: lockstep nodes."""
        self.groups = {name: tuple(targets) for name, targets in groups.items()}
        self.nodes = frozenset(nodes)
        self.rank_of = {t.name: (name, r) for name, targets in self.groups.items() for r, t in enumerate(targets)}
        self._pad_ids = itertools.count()  # a pad's iteration: unique, so runs never collide on a replica
        self.num_pads = 0

    def pads(self, sent: Iterable[tuple[str, Any]]) -> list[tuple[Any, int]]:
        """(node, target) of one pump's new runs -> (target, padding units it needs)."""
        counts: dict[str, list[int]] = {}
        for node, target in sent:
            if node in self.nodes and target.name in self.rank_of:
                group, rank = self.rank_of[target.name]
                counts.setdefault(group, [0] * len(self.groups[group]))[rank] += 1
        out = []
        for group, per_rank in counts.items():
            top = max(per_rank)
            out += [(self.groups[group][r], top - n) for r, n in enumerate(per_rank) if n < top]
        return out

    def pad_item(self, request_id: str, walk: str) -> OpenNode:
        self.num_pads += 1
        return OpenNode(request_id, LOCKSTEP_PAD, walk, (next(self._pad_ids),))
