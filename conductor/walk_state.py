"""Algorithm 1 for one walk of one request, without I/O (ready -> dispatch -> collect).

Values are tagged (node, port, iteration tag). A tag has one index per enclosing
loop; a consumer at tag t reads a producer of an enclosing scope at t's prefix, a
producer inside a loop it is not in through the loop's exit (last or accumulate),
and a carry edge from the previous iteration. Values are tuples of parts (the
consumer concatenates them along dim 0): one part, or one per accumulated
iteration or streamed item.
"""
from __future__ import annotations

from typing import Any, Callable

from conductor.chunk_override import request_policy
from conductor.credit_ledger import CreditLedger
from conductor.dispatch import Dispatch, Value, chunk_info
from runtime.edge_stats import now_us
from conductor.edge_timer import EdgeTimer
from conductor.loop_state import LoopTracker
from conductor.walk_scope import Tag, WalkScope
from graph.edge import GraphEdge
from graph.node import WALK_INPUT, WALK_OUTPUT
from graph.stream_buffer import StreamBuffer
from runtime.received_rows import ReceivedRows, RowsView


def as_is(value: Value) -> Value:
    return value


class WalkState:
    def __init__(self, scope: WalkScope, inputs: dict[str, Value], client_room=lambda: 1 << 30,
                 params: dict | None = None, materialize: Callable[[Value], Any] = as_is,
                 silent: frozenset[str] = frozenset(), keep_outputs: bool = True) -> None:
        """materialize: a value held by reference -> its tensor, for stop rules; silent: walk
        outputs the client does not take (never streamed, never credited for);
        keep_outputs: collect every walk output in `outputs` (a later walk may read them),
        False: they are only streamed (a long stream's audio is not held to its end)."""
        self.scope = scope
        self.silent = silent
        self.keep_outputs = keep_outputs
        self.params = params or {}  # the request's: a chunk policy may take its first_chunk
        self.credits = CreditLedger(self, client_room)
        self.inputs = inputs
        self.values: dict[tuple[str, str, Tag], Value] = {}
        self.dispatched: set[tuple[str, Tag]] = set()
        self.done: set[tuple[str, Tag]] = set()
        self.loops = LoopTracker(scope, self, materialize)
        self.buffers: dict[tuple[GraphEdge, Tag], StreamBuffer] = {}
        self.chunk_runs: dict[tuple[str, Tag], list[int]] = {}  # (node, scope) -> [open, next seq]
        self.pending_chunks: dict[tuple[str, Tag], list] = {}
        self.outputs: dict[str, list[Any]] = {}
        self.held: dict[tuple[str, Tag], dict[int, dict]] = {}  # chunk outputs waiting for their turn
        # (node, parent tag) -> the last iteration a loop inside a component produced (its exit)
        self.inner_last: dict[tuple[str, Tag], int] = {}
        self.next_seq: dict[tuple[str, Tag], int] = {}
        self.timer = EdgeTimer()
        self.emitted: list[tuple[str, Any]] = []  # walk outputs to stream, drained by the executor
        self.spec_held: dict[tuple[str, Tag], list] = {}  # (loop, iteration) -> outputs not yet shown
        self.num_wasted = 0  # speculative runs past a stop (their outputs never shown)
        # Whether anything changed that may make a run ready: ready() scans only then (an
        # output only forwarded to the client, the per-item case, changes nothing).
        self.is_dirty = True
        self.loops.update()  # enters the top-level loops

    # ---- readiness ---------------------------------------------------------------

    def scoped(self, node: str, port: str, tag: Tag) -> Value | None:
        """`node.port` as seen from a scope with tag `tag` (through loop exits if deeper)."""
        depth = len(self.scope.path[node])
        if depth <= len(tag):
            return self.values.get((node, port, tag[:depth]))
        return self.loops.exit_value(self.scope.path[node][len(tag)], node, port, tag)

    def feeding_edge(self, node: str, port: str, tag: Tag) -> tuple[GraphEdge, bool]:
        """The edge that feeds `node.port` at `tag`, and whether it is the loop's carry
        (iterations after the first of a conductor-driven loop)."""
        carry = self.scope.carry_in[node].get(port)
        if carry is not None and tag and tag[-1] > 0 and node not in self.scope.inner:
            return carry, True
        return self.scope.in_edges[node][port], False

    def input_value(self, node: str, port: str, tag: Tag) -> Value | None:
        edge, is_carry = self.feeding_edge(node, port, tag)
        if is_carry:
            return self.values.get((edge.src_node, edge.src_port, tag[:-1] + (tag[-1] - 1,)))
        if edge.src_node == WALK_INPUT:
            return self.inputs.get(edge.src_port)
        common = self.scope.common(edge.src_node, node)
        return self.scoped(edge.src_node, edge.src_port, tag[:common])

    def _gather(self, node: str, tag: Tag, skip: str = "") -> dict[str, Value] | None:
        inputs = {}
        for port in self.scope.in_edges[node]:
            if port == skip:
                continue
            value = self.input_value(node, port, tag)
            if value is None:
                return None
            inputs[port] = value
        return inputs

    def ready(self) -> list[Dispatch]:
        if not self.is_dirty:
            return []
        self.is_dirty = False
        self.credits.is_waiting_room = False
        out = []
        for node in self.scope.nodes:
            for tag in self.loops.active_tags(self.scope.depth(node), node):
                if node in self.scope.routed_in:
                    continue  # routed: its producer's runtime feeds it, its replica opens the chunk runs
                if node in self.scope.stream_in:
                    out += self._ready_chunks(node, tag)
                elif (node, tag) not in self.dispatched:
                    pushed = self.scope.pushed.get(node)
                    inputs = self._gather(node, tag, skip=pushed.dst_port if pushed else "")
                    if inputs is not None and (node in self.scope.inner or self.credits.can_run(node, tag)):
                        self.dispatched.add((node, tag))
                        self._record(node, tag, inputs)
                        out.append(Dispatch(node, tag, inputs, self.scope.inner.get(node),
                                            credits=self.credits.initial(node, tag)))
                if (node in self.scope.pushed and node not in self.scope.routed_push
                        and (node, tag) in self.dispatched and (node, tag) not in self.done):
                    out += self._ready_pushes(node, tag)
        return out

    def _ready_pushes(self, node: str, tag: Tag) -> list[Dispatch]:
        """Chunks for a loop running inside its component; the last one ends the stream."""
        edge = self.scope.pushed[node]
        out = []
        for chunk in self.buffer(edge, tag[: self.scope.common(edge.src_node, node)]).pop_ready():
            if chunk.items:
                self.timer.chunk(edge, chunk)
            inputs = {edge.dst_port: chunk.items} if chunk.items else {}
            out.append(Dispatch(node, tag, inputs, chunk=chunk_info(chunk), push=True))
        return out

    def _record(self, node: str, tag: Tag, inputs: dict[str, Value]) -> None:
        """Edge latency: each input's production -> this dispatch."""
        now = now_us()
        for port, value in inputs.items():
            if value:
                edge, _ = self.feeding_edge(node, port, tag)
                self.timer.hop(edge, value, now)

    def _ready_chunks(self, node: str, tag: Tag) -> list[Dispatch]:
        edge = self.scope.stream_in[node]
        buf = self.buffer(edge, tag[: self.scope.common(edge.src_node, node)])
        pending = self.pending_chunks.setdefault((node, tag), [])
        pending += buf.pop_ready()
        runs = self.chunk_runs.setdefault((node, tag), [0, 0])
        out = []
        while pending:
            chunk = pending[0]
            if not chunk.items:  # the empty end-of-stream marker
                pending.pop(0)
                continue
            inputs = self._gather(node, tag, skip=edge.dst_port)
            if inputs is None or not self.credits.can_run(node, tag):
                break
            pending.pop(0)
            self._record(node, tag, inputs)
            self.timer.chunk(edge, chunk)
            inputs[edge.dst_port] = chunk.items
            out.append(Dispatch(node, tag + (runs[1],), inputs, chunk=chunk_info(chunk)))
            runs[0] += 1
            runs[1] += 1
        self._close_if_drained(node, tag)
        return out

    def _close_if_drained(self, node: str, tag: Tag) -> None:
        """A chunk-fed node ends its own outgoing streams once its input stream is
        closed and every chunk run is done (two streaming edges in a row)."""
        if self.is_node_done(node, tag):
            self.finish_streams(node, tag, len(self.scope.path[node]))

    def buffer(self, edge: GraphEdge, tag: Tag) -> StreamBuffer:
        key = (edge, tag)
        if key not in self.buffers:
            self.buffers[key] = StreamBuffer(request_policy(edge, self.params), edge.max_buffered,
                                             name=f"edge {edge}")
        return self.buffers[key]

    # ---- collect -----------------------------------------------------------------

    def take_emitted(self) -> list[tuple[str, Any]]:
        emitted, self.emitted = self.emitted, []
        return emitted

    def confirm(self, loop: str, tag: Tag) -> None:
        """The loop went on into `tag`: its speculative outputs are real now."""
        for node, iteration, outputs in self.spec_held.pop((loop, tag), []):
            self._route(node, iteration, outputs)

    def discard(self, loop, tag: Tag) -> None:
        """The loop stopped before `tag`: drop what ran ahead, count the waste."""
        self.spec_held.pop((loop.name, tag), None)
        members, n = self.scope.members[loop.name], len(tag)
        wasted = {key for key in self.dispatched if key[0] in members and key[1][:n] == tag}
        self.num_wasted += len(wasted)
        self.credits.dropped([n for n, _ in wasted])
        self.dispatched -= wasted
        self.done -= wasted
        for key in [k for k in self.values if k[0] in members and k[2][:n] == tag]:
            del self.values[key]

    def forget(self, loop, tag: Tag) -> None:
        """Releases an iteration's state after its last use; accumulated ports stay
        until the loop exits (they are its output)."""
        members, n = self.scope.members[loop.name], len(tag)
        for key in [k for k in self.values if k[0] in members and k[2][:n] == tag]:
            if f"{key[0]}.{key[1]}" not in loop.accumulate:
                self.timer.forget(self.values.pop(key))
        self.done = {key for key in self.done if not (key[0] in members and key[1][:n] == tag)}
        self.dispatched = {key for key in self.dispatched if not (key[0] in members and key[1][:n] == tag)}

    def on_output(self, node: str, iteration: Tag, outputs: dict[str, Any],
                  produced_us: float | None = None) -> None:
        """Stores a run's outputs; returns (walk output name, value) pairs to stream.

        Chunk runs of one node may finish out of order (several replicas): their
        outputs are applied in chunk order, so streams downstream stay in order."""
        if self.loops.is_discarded(node, iteration):
            return
        if node not in self.scope.client_only:
            self.is_dirty = True
        if node in self.scope.inner or node in self.scope.routed_in:
            self.credits.produced(node, iteration[:-1], outputs)
        if node in self.scope.inner:  # a loop inside a component: only the last can exit
            key = (node, iteration[:-1])
            self.inner_last[key] = max(self.inner_last.get(key, -1), iteration[-1])
            if iteration[-1] >= 1:
                self.forget(self.scope.inner[node], iteration[:-1] + (iteration[-1] - 1,))
        if node not in self.scope.client_only:  # a client-only node's outputs are never dispatched: no hop to time
            self.timer.stamp(outputs, produced_us)
        if node not in self.scope.stream_in:
            return self._apply_output(node, iteration, outputs)
        key = (node, iteration[:-1])
        held = self.held.setdefault(key, {})
        held[iteration[-1]] = outputs
        while self.next_seq.get(key, 0) in held:
            seq = self.next_seq.get(key, 0)
            self._apply_output(node, key[1] + (seq,), held.pop(seq))
            self.next_seq[key] = seq + 1

    def on_rows(self, rows: ReceivedRows, entries: list[int]) -> bool:
        """Entries of a batch of this request's outputs (runtime.received_rows), as on_output
        would take them one by one; False (nothing done) unless their node only feeds the
        client and its outputs are not kept (scope.forwarded, keep_outputs False). A
        walk output taken from one port of the node goes out as ONE RowsView of the entries;
        from several ports, value by value, entry by entry (the per-entry order)."""
        node, iterations = rows.node, rows.iterations
        if node not in self.scope.forwarded or self.keep_outputs:
            return False
        if node in self.scope.stream_in and not self._next_chunks(node, [iterations[i] for i in entries]):
            return False
        if node in self.scope.routed_in:
            for i in entries:
                self.credits.produced(node, iterations[i][:-1], rows.columns)
        edges = [e for e in self.scope.to_client[node] if e.src_port in rows.columns and e.dst_port not in self.silent]
        if len(edges) == 1:
            self.emitted.append((edges[0].dst_port, RowsView(rows.columns[edges[0].src_port], entries)))
        else:
            self.emitted += [(e.dst_port, rows.columns[e.src_port].ref(i)) for i in entries for e in edges]
        self.credits.delivered(len(entries) * len(edges))
        return True

    def _next_chunks(self, node: str, iterations: list[Tag]) -> bool:
        """Chunk outputs apply in chunk order (on_output holds early ones): True, and they
        are counted as applied, when these are exactly the next ones of one run and none is
        held; False (nothing changed) otherwise."""
        key = (node, iterations[0][:-1])
        first = self.next_seq.get(key, 0)
        if self.held.get(key) or any(it != key[1] + (first + j,) for j, it in enumerate(iterations)):
            return False
        self.next_seq[key] = first + len(iterations)
        return True

    def _apply_output(self, node: str, iteration: Tag, outputs: dict[str, Any]) -> None:
        if node not in self.scope.client_only:  # no run reads a client-only node's values: not kept per item
            for port, value in outputs.items():
                self.values[(node, port, iteration)] = (value,)
        ahead = self.loops.is_speculative(node, iteration)
        if ahead is not None:  # visible only once the loop really reaches this iteration
            self.spec_held.setdefault(ahead, []).append((node, iteration, outputs))
            return
        self._route(node, iteration, outputs)

    def _route(self, node: str, iteration: Tag, outputs: dict[str, Any]) -> None:
        """To the client (walk outputs) and into stream buffers."""
        for edge in self.scope.out_edges[node]:
            if edge.src_port not in outputs:
                continue
            value = outputs[edge.src_port]
            if edge.dst_node == WALK_OUTPUT:
                if edge.dst_port in self.silent:
                    continue
                if self.keep_outputs:
                    self.outputs.setdefault(edge.dst_port, []).append(value)
                self.emitted.append((edge.dst_port, value))
                self.credits.delivered()
            elif edge.is_streaming and edge not in self.scope.routed:
                common = self.scope.common(node, edge.dst_node)
                self.buffer(edge, iteration[:common]).push([value])

    def on_done(self, node: str, iteration: Tag) -> None:
        if self.loops.is_discarded(node, iteration):
            return
        self.is_dirty = True
        if node in self.scope.routed_in:
            if len(iteration) == self.scope.depth(node):  # the replica's "every chunk run ended"
                self.done.add((node, iteration))
                self.credits.finished(node, iteration)
                self.finish_streams(node, iteration, len(self.scope.path[node]))
            self.loops.update()
            return
        if node in self.scope.stream_in:
            self.chunk_runs[(node, iteration[:-1])][0] -= 1
            self._close_if_drained(node, iteration[:-1])
            self.loops.update()
            return
        self.done.add((node, iteration))
        if node in self.scope.inner:
            self.credits.finished(node, iteration)
            self.loops.finish_inner(self.scope.inner[node], node, iteration)
        else:
            self.finish_streams(node, iteration, len(self.scope.path[node]))
        self.loops.update()

    def finish_streams(self, node: str, tag: Tag, depth: int) -> None:
        """Ends the streams out of `node` whose buffers live at scope depth `depth`."""
        for edge in self.scope.out_edges[node]:
            if edge.is_streaming and edge not in self.scope.routed and self.scope.common(node, edge.dst_node) == depth:
                self.buffer(edge, tag[:depth]).finish()

    def is_node_done(self, node: str, tag: Tag) -> bool:
        if node in self.scope.routed_in:
            return (node, tag) in self.done
        if node in self.scope.stream_in:
            edge = self.scope.stream_in[node]
            buf = self.buffers.get((edge, tag[: self.scope.common(edge.src_node, node)]))
            runs = self.chunk_runs.get((node, tag), [0, 0])
            return buf is not None and buf.is_closed and runs[0] == 0 and not self.pending_chunks.get((node, tag))
        return (node, tag) in self.done

    @property
    def is_complete(self) -> bool:
        return all(self.is_node_done(n, ()) for n in self.scope.top_nodes()) and self.loops.all_finished(())
