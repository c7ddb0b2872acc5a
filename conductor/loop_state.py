"""Loop bookkeeping of one walk: current iteration per (loop, parent tag), stop
decisions at iteration boundaries, and loop exits (last / accumulate)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from graph.composites import Loop, node_names

if TYPE_CHECKING:
    from conductor.walk_state import Tag, Value, WalkState
    from conductor.walk_scope import WalkScope


class LoopTracker:
    """Iterations of conductor-driven loops advance one at a time: k + 1 becomes
    active once every node of iteration k is done and the stop rule said go on."""

    def __init__(self, scope: "WalkScope", state: "WalkState", materialize: Callable[["Value"], Any]) -> None:
        """Starts no loop: the state calls update() once it is complete."""
        self.scope = scope
        self.state = state
        self.current: dict[tuple[str, Tag], int] = {}   # (loop, parent tag) -> k
        self.finished: dict[tuple[str, Tag], int] = {}  # (loop, parent tag) -> last k (-1: none)
        self.materialize = materialize  # Value -> tensor, for stop rules on references

    def active_tags(self, depth: int, node: str) -> list["Tag"]:
        """Tags a node may run at now; with speculation also the next iteration of a
        DynamicLoop, before the current one's stop decision (at most one ahead)."""
        if depth == 0:
            return [()]
        loop = self.scope.path[node][depth - 1]
        ahead = loop.stop is not None and node in self.scope.speculative and loop not in self.scope.inner.values()
        tags = []
        for (name, t), k in self.current.items():
            if name == loop.name:
                tags.append(t + (k,))
                if ahead and k + 1 < loop.max_iters:
                    tags.append(t + (k + 1,))
        return tags

    def _enclosing(self, node: str, iteration: "Tag"):
        for i, loop in enumerate(self.scope.path[node][: len(iteration)]):
            yield loop, iteration[:i], iteration[i]

    def is_speculative(self, node: str, iteration: "Tag") -> tuple[str, "Tag"] | None:
        """(loop, iteration tag) when `iteration` runs ahead of its loop's current one."""
        if not self.scope.path[node]:
            return None
        for loop, t, k in self._enclosing(node, iteration):
            if self.current.get((loop.name, t), k) < k:
                return loop.name, t + (k,)
        return None

    def is_discarded(self, node: str, iteration: "Tag") -> bool:
        """A late event of an iteration past its loop's stop: never shown."""
        if not self.scope.path[node]:  # checked per streamed item: most nodes are in no loop
            return False
        return any(self.finished.get((loop.name, t), k) < k for loop, t, k in self._enclosing(node, iteration))

    def _parent_tags(self, loop: Loop) -> list["Tag"]:
        depth = self.scope.loop_depth(loop)
        return self.active_tags(depth, node_names(loop)[0])

    def update(self) -> None:
        """Starts, advances and finishes conductor-driven loops until nothing changes."""
        changed = True
        while changed:
            changed = False
            for loop in self.scope.loops:
                if loop in self.scope.inner.values():
                    continue
                for t in self._parent_tags(loop):
                    changed |= self._advance(loop, t)

    def _advance(self, loop: Loop, t: "Tag") -> bool:
        key = (loop.name, t)
        if key in self.finished:
            return False
        if key not in self.current:
            self.current[key] = 0
            return True
        k = self.current[key]
        if not self._iteration_done(loop, t + (k,)):
            return False
        if k + 1 >= loop.max_iters or self._should_stop(loop, t + (k,)):
            del self.current[key]
            self.finished[key] = k
            self.state.discard(loop, t + (k + 1,))
            for node in self.scope.members[loop.name]:
                self.state.finish_streams(node, t, len(t))
        else:
            self.current[key] = k + 1
            self.state.confirm(loop.name, t + (k + 1,))
            if k > 0:  # iteration k + 1 reads k (carry); k - 1 is past its last use
                self.state.forget(loop, t + (k - 1,))
        return True

    def _iteration_done(self, loop: Loop, tag: "Tag") -> bool:
        if not all(self.state.is_node_done(n, tag) for n in self.scope.direct_members(loop)
                   if n not in self.scope.inner):
            return False
        return all((child.name, tag) in self.finished for child in self.scope.child_loops(loop))

    def _should_stop(self, loop: Loop, tag: "Tag") -> bool:
        if loop.stop is None:
            return False
        node, _, port = loop.stop.watch.partition(".")
        value = self.state.scoped(node, port, tag)
        return value is not None and loop.stop.should_stop(self.materialize(value))

    def finish_inner(self, loop: Loop, node: str, t: "Tag") -> None:
        """A loop run inside a component ended (its NodeDone): its last iteration is
        the highest one it produced."""
        self.finished[(loop.name, t)] = self.state.inner_last.get((node, t), -1)
        self.state.finish_streams(node, t, len(t))

    def exit_value(self, loop: Loop, node: str, port: str, tag: "Tag") -> "Value | None":
        """`node.port` leaving `loop` entered at `tag`: last iteration, or all of them."""
        last = self.finished.get((loop.name, tag))
        if last is None:
            return None
        if f"{node}.{port}" in loop.accumulate:
            parts: list[Any] = []
            for k in range(last + 1):
                value = self.state.scoped(node, port, tag + (k,))
                if value is None:
                    return None
                parts += value
            return tuple(parts)
        return None if last < 0 else self.state.scoped(node, port, tag + (last,))

    def all_finished(self, tag: "Tag") -> bool:
        return all((lp.name, tag) in self.finished for lp in self.scope.child_loops(None))
