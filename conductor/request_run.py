"""Per-request state on the conductor, in one object."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from conductor.client_queue import ClientQueue
from conductor.walk_state import WalkState
from core.pace import NodePace, Pace

END = object()  # end marker on a request's client queue


@dataclass
class Failure:
    status: str   # grpc.StatusCode name
    message: str


@dataclass
class RequestRun:
    """A request's walk state, the targets it reached (to cancel/clean up there) and
    the queue of events for its client. Invariant: `state` is None once finished."""

    request_id: str
    inputs: dict[str, tuple]
    params: dict[str, Any]
    walk: str
    state: WalkState | None
    queue: ClientQueue = field(default_factory=ClientQueue)
    reached: dict[str, Any] = field(default_factory=dict)  # target name -> target
    # target name -> when the target last listed the request in its heartbeat (or when
    # it was first sent there); targets without heartbeats (in-process) are not in it
    seen: dict[str, float] = field(default_factory=dict)
    spans: list = field(default_factory=list)  # request span, walk span
    max_backlog: int = 256  # outputs queued for a client that does not read: the bound
    targets: dict = field(default_factory=dict)  # (node, iteration) -> target of that run
    traceparent: str = ""  # the current walk span's W3C context, sent with every run it opens
    # Media deadlines: node -> NodePace (the model's pacing) and the playback origin
    # (unix seconds; conductor.playback moves it); None: the request has no deadline.
    pacing: Mapping[str, NodePace] = field(default_factory=dict)
    origin_s: float | None = None
    # Walk outputs its client does not take: their ports stay on their services when
    # nothing else reads them (WalkScope.quiet_for)
    silent: frozenset[str] = frozenset()
    # Kept KV contexts every run of it reads or leaves (core.context_use.ContextUse), and
    # what its nodes reported about them (`note`): the caller reads it for Usage.
    contexts: tuple = ()
    report: dict = field(default_factory=dict)

    def note(self, node: str, metadata: Mapping[str, Any], target) -> None:
        """A node output's report about kept contexts: `cached_prompt_tokens` (from the node
        that read the prompt) and `context_kept` (the id it kept its part under); the
        replica that keeps it is remembered per node (where a later request must go)."""
        cached = metadata.get("cached_prompt_tokens")
        if cached is not None:  # with the prompt's length in the engine (a continued context's included)
            self.report["cached_prompt_tokens"] = int(cached)
            self.report["prompt_tokens"] = int(metadata.get("prompt_tokens", 0))
            if self.spans:  # the request's trace says how much of its prompt the cache gave
                self.spans[0].set_attributes({"starmesh.cached_prompt_tokens": int(cached),
                                              "starmesh.prompt_tokens": self.report["prompt_tokens"]})
        summary = metadata.get("prefix_summary")
        if summary is not None and target is not None:  # what its replica holds now
            self.report["prefix_summary"] = (target.name, summary)
        kept = metadata.get("context_kept")
        if kept:
            self.report["context_id"] = kept
            if target is not None:
                self.report.setdefault("holders", {})[node] = target.name

    def pace_of(self, node: str, first_item: int = 0) -> Pace | None:
        """When `node`'s run's items are due (its chunk's first new item is first_item)."""
        declared = self.pacing.get(node)
        if declared is None or self.origin_s is None:
            return None
        return declared.at(self.origin_s, first_item)

    def reach(self, target, now: float) -> None:
        """The request was sent to `target`: cancel it there at the end, and expect
        the target's heartbeats to list it from now on."""
        if target.name not in self.reached:
            self.reached[target.name] = target
            if getattr(target, "heartbeats", False):
                self.seen[target.name] = now

    def client_room(self) -> int:
        return self.max_backlog - len(self.queue)

    @property
    def is_finished(self) -> bool:
        return self.state is None
