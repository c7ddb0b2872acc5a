"""Toy components and graphs of the conductor benchmark (bench.conductor).

Three services, each a `bench.toys.Toy`:
- A (`make_a`): `src`, a loop run inside the service, emitting one item per
  engine step; `step`, one step of a conductor-driven loop (sleeps `step_s`: the
  device compute g of formula (9)).
- B (`make_b`): `mid`, per streamed item (identity); `check`, the stop decision
  (spins the CPU for `check_s`: host-side work, and decides `x >= limit`).
- C (`make_c`): `sink`, per streamed item (identity).

Request params drive the costs, so one set of processes serves every phase:
`interval_s` paces `src` (one engine step every interval; 0: as fast as it can),
`step_s` and `check_s` are the per-iteration costs of the speculation loop.
"""
from __future__ import annotations

import time

from bench.toys import Toy


class PacedToy(Toy):
    """A Toy whose engine step sleeps the smallest `interval_s` of its open loops."""

    def step(self):
        intervals = [float(run.item.params.get("interval_s", 0.0)) for run in self._loops.values()]
        if intervals and min(intervals) > 0:
            time.sleep(min(intervals))
        return super().step()


def _step(inputs, params):
    time.sleep(float(params.get("step_s", 0.0)))
    return {"x": inputs["x"] + 1}


def _check(inputs, params):
    deadline = time.perf_counter() + float(params.get("check_s", 0.0))
    while time.perf_counter() < deadline:  # host-side work: burns the CPU, unlike a sleep
        pass
    return {"stop": (inputs["x"] >= inputs["limit"]).to(inputs["x"].dtype)}


def make_a():
    return PacedToy("bench_a", {"src": lambda i, p: {"x": i["n"] + 1}, "step": _step}, loops={"src": {"x": "n"}})


def make_b(item_runs: bool = True, columnar: bool = False):
    """item_runs: `mid` takes a per-item stream as one run (False: one run per item);
    columnar: a step maps the items of all its runs at once, returned as one NodeOutputs.
    Not by default: mid's outputs route on, item by item, and a row view per entry costs
    the runtime more than the identity's reuse of each pushed view (bench.routed_item:
    18.7 against 16.9 us per item)."""
    mid = ("mid",) if item_runs else ()
    return Toy("bench_b", {"mid": lambda i, p: {"y": i["x"]}, "check": _check}, item_nodes=mid,
               columnar=mid if columnar else ())


def make_c(item_runs: bool = True, columnar: bool = True):
    """columnar: sink's outputs go only to the client, as one OutputRows per stream and step."""
    sink = ("sink",) if item_runs else ()
    return Toy("bench_c", {"sink": lambda i, p: {"z": i["y"]}}, item_nodes=sink, columnar=sink if columnar else ())


# ---- graphs ------------------------------------------------------------------------

def pipeline_graph(n: int):
    """src (loop of n iterations inside A) ~FixedChunk(1)~> mid ~FixedChunk(1)~> sink -> output.z"""
    from graph.chunking import FixedChunk
    from graph.composites import Loop, Sequential
    from graph.edge import GraphEdge as E
    from graph.edge import StreamingGraphEdge as S
    from graph.node import GraphNode as N
    from graph.walk import Walk, WalkGraph

    nodes = [N("src", ("n",), ("x",)), N("mid", ("x",), ("y",)), N("sink", ("y",), ("z",))]
    walk = Walk("stream", Sequential(Loop("gen", "src", max_iters=n), "mid", "sink"), [
        E("input.n", "src.n"), S("src.x", "mid.x", chunk_policy=FixedChunk(1)),
        S("mid.y", "sink.y", chunk_policy=FixedChunk(1)), E("sink.z", "output.z")])
    return WalkGraph("pipe", nodes, [walk])


PIPELINE_INNER_LOOPS = frozenset({"gen"})


def _stop(value) -> bool:
    return bool(value.any())


def loop_graph(max_iters: int):
    """DynamicLoop(step on A -> check on B), driven by the conductor; x carried; each
    iteration's x streams to the client; stops once check says x >= limit."""
    from graph.composites import DynamicLoop, Sequential, StopRule
    from graph.edge import GraphEdge as E
    from graph.node import GraphNode as N
    from graph.walk import Walk, WalkGraph

    nodes = [N("step", ("x",), ("x",)), N("check", ("x", "limit"), ("stop",))]
    loop = DynamicLoop("iterate", Sequential("step", "check"), max_iters=max_iters, carry=[E("step.x", "step.x")],
                       stop=StopRule("check.stop", predicate=_stop))
    walk = Walk("spec", loop, [E("input.x", "step.x"), E("step.x", "check.x"), E("input.limit", "check.limit"),
                               E("step.x", "output.x")])
    return WalkGraph("loop", nodes, [walk])
