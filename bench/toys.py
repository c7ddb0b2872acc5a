"""Toy numeric components for the conductor's tests and benchmarks: each node is a function of
its input tensors; loop nodes run their loop inside the component, one iteration per
engine step for every open run (continuous batching in miniature)."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from runtime.items import NodeDone, NodeError, NodeOutput, NodeOutputs, OpenNode
from core.errors import InvalidArgument


@dataclass
class LoopRun:
    item: OpenNode
    state: dict
    k: int = 0
    stream: dict | None = None  # a streamed input: {"port", "continue_after_producer_done"}
    queue: list = field(default_factory=list)  # pushed items not consumed yet
    is_eos: bool = False

    @property
    def is_runnable(self) -> bool:
        """A loop fed by a stream steps once per pushed item, and after the stream
        ended only if it continues after its producer is done."""
        return self.stream is None or bool(self.queue) or self.is_eos

@dataclass
class Toy:
    """fns[node](inputs, params) -> outputs. loops[node] = {out_port: in_port} carried
    between the iterations of a loop that runs inside this component. item_nodes: nodes
    it maps item by item when a per-item routed edge feeds them one run for its stream
    (runtime.route_item_runs): each engine step answers the items queued, an output each
    at iteration + (k,), and the run ends with the stream."""

    name: str
    fns: dict[str, Callable]
    loops: dict[str, dict[str, str]] = field(default_factory=dict)
    max_delay_s: float = 0.0
    fail_on: str = ""  # a request id whose runs raise
    step_delay_s: float = 0.0  # a slow engine step while loops are open (cancellation tests)
    run_delay_s: float = 0.0  # per loop run advanced in a step: a batch costs more with more runs
    predicates: dict[str, Callable] = field(default_factory=dict)  # registered stop rules, by name
    seed: int = 0
    item_nodes: tuple[str, ...] = ()
    # item nodes whose fn maps rows independently and reads no params: a step answers the
    # queued items of every run of the node with one call on their stacked rows, returned
    # as one NodeOutputs (a component's columnar outputs)
    columnar: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.nodes = tuple(self.fns)
        self._events, self._loops = [], {}
        self._rng = random.Random(self.seed)
        self.num_opened = 0
        self.parked: set = set()  # loop runs waiting for credit (backpressure)

    def open(self, item: OpenNode, inputs) -> None:
        if item.request_id == self.fail_on:
            raise RuntimeError(f"toy {self.name} fails request {item.request_id} on purpose")
        self.num_opened += 1
        predicate = item.stop_rule.component_predicate
        if predicate and predicate not in self.predicates:
            raise InvalidArgument(f"stop_rule.predicate {predicate!r} is not registered by {self.name}")
        if item.node in self.loops or (item.node in self.item_nodes and item.stream is not None):
            stream = item.stream and {"port": item.stream.port,
                                      "continue_after_producer_done": item.stream.continue_after_producer_done}
            run = LoopRun(item, {k: v.clone() for k, v in inputs.items()}, stream=stream)
            self._loops[(item.request_id, item.node, item.iteration)] = run
            return
        if self.max_delay_s:
            time.sleep(self._rng.uniform(0, self.max_delay_s))
        params = {**item.params, "_chunk": vars(item.chunk)} if item.chunk else item.params
        outputs = self.fns[item.node](inputs, params)
        self._events += [NodeOutput(item.request_id, item.node, outputs, item.iteration),
                         NodeDone(item.request_id, item.node, iteration=item.iteration)]

    def push(self, item, tensors) -> None:
        run = self._loops[(item.request_id, item.node, item.iteration)]
        if item.port in tensors:
            run.queue += list(tensors[item.port][item.num_context:].split(1))
        run.is_eos = item.end_of_stream

    def push_rows(self, batch) -> dict:
        """A step's pushes in one call (runtime.row_batch); an entry for a run that is not
        open fails alone, as its push would."""
        failures = {}
        for i, key in enumerate(zip(batch.request_ids, batch.nodes, batch.iterations)):
            run = self._loops.get(key)
            if run is None:
                failures[i] = KeyError(key)
                continue
            start, stop = batch.starts[i] + batch.num_context[i], batch.stops[i]
            if stop - start == 1:  # one new item (a per-item stream): one view, not a split (~1 us, not ~4)
                run.queue.append(batch.rows[start:stop])
            elif stop > start:
                run.queue += list(batch.rows[start:stop].split(1))
            run.is_eos = batch.ends[i]
        return failures

    def cancel(self, request_id: str) -> None:
        self._events = [e for e in self._events if e.request_id != request_id]
        self._loops = {k: v for k, v in self._loops.items() if k[0] != request_id}
        self.parked = {k for k in self.parked if k[0] != request_id}

    def has_work(self) -> bool:
        return bool(self._events) or any(k not in self.parked and r.is_runnable for k, r in self._loops.items())

    def step(self):
        if self._loops and self.step_delay_s:
            time.sleep(self.step_delay_s)
        active = [key for key in self._loops if key not in self.parked]
        if active and self.run_delay_s:
            time.sleep(self.run_delay_s * len(active))
        events, self._events = self._events, []
        columns: dict[str, list] = {}  # columnar node -> its runs that step
        for key, run in list(self._loops.items()):
            if key not in self.parked and run.is_runnable:
                if run.item.node in self.columnar and run.stream is not None:
                    columns.setdefault(run.item.node, []).append((key, run))
                else:
                    events += self._advance(key, run)
        for node, runs in columns.items():
            events += self._map_columns(node, runs)
        return events

    def park(self, request_id, node, iteration) -> None:
        self.parked.add((request_id, node, iteration))

    def resume(self, request_id, node, iteration) -> None:
        self.parked.discard((request_id, node, iteration))

    def _advance(self, key, run: LoopRun):
        item = run.item
        if item.node not in self.loops:
            return self._map_items(key, run)
        if run.stream is not None:
            if run.queue:
                run.state[run.stream["port"]] = run.queue.pop(0)
            elif not run.stream["continue_after_producer_done"]:  # the stream ended: so does the loop
                return [self._end(key, run)]
        outputs = self.fns[item.node](run.state, item.params)
        events = [NodeOutput(item.request_id, item.node, outputs, item.iteration + (run.k,))]
        for out_port, in_port in self.loops[item.node].items():
            run.state[in_port] = outputs[out_port]
        run.k += 1
        stop_ids = set(item.stop_rule.stop_token_ids)
        hit = any(int(v) in stop_ids for v in next(iter(outputs.values())).reshape(-1).tolist())
        if item.stop_rule.component_predicate:
            hit = hit or self.predicates[item.stop_rule.component_predicate](outputs)
        if hit or run.k >= item.max_iters:
            events.append(self._end(key, run))
        return events

    def _map_items(self, key, run: LoopRun) -> list:
        """An item run's step answers every item queued (the runtime hands it no more than
        the run's client credit covers); the run ends with its stream."""
        item, fn, port, events = run.item, self.fns[run.item.node], run.stream["port"], []
        for value in run.queue:
            events.append(NodeOutput(item.request_id, item.node, fn({port: value}, item.params),
                                     item.iteration + (run.k,)))
            run.k += 1
        run.queue = []
        if run.is_eos:
            events.append(self._end(key, run))
        return events

    def _map_columns(self, node: str, runs: list) -> list:
        """Every queued item of these item runs of `node` in one call of its fn: one
        NodeOutputs, entry i one item ([N, ...] rows); a run whose stream ended ends."""
        rids, iterations, values = [], [], []
        for _, run in runs:
            item = run.item
            for value in run.queue:
                rids.append(item.request_id)
                iterations.append(item.iteration + (run.k,))
                values.append(value)
                run.k += 1
            run.queue = []
        events = []
        if values:
            port = runs[0][1].stream["port"]
            events.append(NodeOutputs(node, tuple(rids), tuple(iterations), self.fns[node]({port: torch.cat(values)}, {})))
        events += [self._end(key, run) for key, run in runs if run.is_eos]
        return events

    def _end(self, key, run: LoopRun) -> NodeDone:
        """The run is over: forgotten (parked or not), and its NodeDone."""
        del self._loops[key]
        self.parked.discard(key)
        return NodeDone(run.item.request_id, run.item.node, iteration=run.item.iteration)

    def ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


# ---- a 3-service toy speech-like pipeline: embed -> lm (loop inside) ~> codec ------

def toy_pipeline(max_iters: int = 12, stop_token: int = 70):
    """embed: x * 2; lm: a loop inside its service emitting n + 1 per step from the
    embedding, stopping at token 0 mod 7 or max_iters; codec: chunks of 3 new frames
    with 2 frames of left context -> 10 * new frames."""
    from graph.chunking import LeftContext
    from graph.composites import DynamicLoop, Sequential, StopRule
    from graph.edge import GraphEdge as E
    from graph.edge import StreamingGraphEdge
    from graph.node import GraphNode as N
    from graph.walk import Walk, WalkGraph

    nodes = [N("embed", ("x",), ("e",)), N("lm", ("n",), ("frame",), stateful=True), N("codec", ("frames",), ("audio",))]
    loop = DynamicLoop("gen", "lm", max_iters=max_iters, stop=StopRule("lm.frame", stop_token_ids=(stop_token,)))
    walk = Walk("speak", Sequential("embed", loop, "codec"), [
        E("input.x", "embed.x"), E("embed.e", "lm.n"),
        StreamingGraphEdge("lm.frame", "codec.frames", chunk_policy=LeftContext(3, 2)),
        E("lm.frame", "output.frame"), E("codec.audio", "output.audio")])
    return WalkGraph("toy", nodes, [walk])


def _decode(inputs, params):
    return {"audio": inputs["frames"][int(params["_chunk"]["num_context"]):] * 10}


def make_embed(fail_on: str = ""):
    return Toy("embed", {"embed": lambda i, p: {"e": i["x"] * 2}}, fail_on=fail_on)


def make_lm(step_delay_s: float = 0.0):
    return Toy("lm", {"lm": lambda i, p: {"frame": i["n"] + 1}}, loops={"lm": {"frame": "n"}},
               step_delay_s=step_delay_s)


def make_slow_lm():
    return make_lm(step_delay_s=0.05)


def make_codec():
    return Toy("codec", {"codec": _decode})


def make_failing_embed():
    return make_embed(fail_on="doomed")
