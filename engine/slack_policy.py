"""The order engines serve requests in, where they must choose: least slack first.

Slack = an item's deadline (core.pace.Pace.due_s) minus now. With `deadline` (the
default) an engine serves its candidates in slack order (ties: arrival), and when any
candidate is urgent (slack below `urgent_s`) the candidates with more than `yield_s`
of slack sit this step out: they have plenty of buffered audio, and a smaller step
reaches the urgent ones sooner (on a CPU shared by the mesh's processes, the time they
leave is the urgent ones' too). With nothing urgent every candidate runs: the policy
never idles an engine that has work. Items without a deadline (no pace: text, images)
count as due `unpaced_s` after they were queued, so they age into urgency and never
starve behind paced ones. `fcfs` keeps arrival order and yields nothing (the baseline).

The policy is pure: engines pass candidates, a slack function and now; it returns who
runs, in order. Ordering changes which step an item runs in, never what it computes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from core.errors import InvalidArgument

T = TypeVar("T")
POLICIES = ("deadline", "fcfs")


@dataclass(frozen=True)
class SlackPolicy:
    kind: str = "deadline"
    urgent_s: float = 0.5
    yield_s: float = 2.0
    unpaced_s: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in POLICIES:
            raise InvalidArgument(f"schedule must be one of {list(POLICIES)}, got {self.kind!r}")
        if not 0 <= self.urgent_s < self.yield_s:
            raise InvalidArgument(f"schedule: need 0 <= urgent_s ({self.urgent_s}) < yield_s ({self.yield_s})")
        if self.unpaced_s < 0:
            raise InvalidArgument(f"schedule.unpaced_s must be >= 0, got {self.unpaced_s}")

    @property
    def is_fcfs(self) -> bool:
        return self.kind == "fcfs"

    def pick(self, candidates: Sequence[T], slack: Callable[[T], float]) -> list[T]:
        """Who runs this step, most urgent first. candidates: in arrival order."""
        if self.is_fcfs or len(candidates) < 2:
            return list(candidates)
        slacks = [slack(c) for c in candidates]
        order = sorted(range(len(candidates)), key=lambda i: slacks[i])  # stable: ties keep arrival order
        if slacks[order[0]] < self.urgent_s:
            order = [i for i in order if slacks[i] <= self.yield_s]
        return [candidates[i] for i in order]

    def most_urgent(self, candidates: Sequence[T], slack: Callable[[T], float]) -> T:
        """The candidate that runs first (the oldest under fcfs)."""
        return candidates[0] if self.is_fcfs else min(candidates, key=slack)


def slack_of(due_s: float | None, queued_s: float, now_s: float, policy: SlackPolicy) -> float:
    """Seconds until an item is due: its deadline, or queued + unpaced_s without one."""
    return (due_s if due_s is not None else queued_s + policy.unpaced_s) - now_s
