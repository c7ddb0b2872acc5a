"""WalkState without I/O: driven by hand like an engine would."""
import torch

from conductor.walk_scope import WalkScope
from conductor.walk_state import WalkState
from graph.composites import Loop, Sequential
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph


def drive(state, fns, max_rounds=10_000):
    peak = 0
    for _ in range(max_rounds):
        dispatches = state.ready()
        if not dispatches:
            break
        for d in dispatches:
            inputs = {k: torch.cat(list(v)) for k, v in d.inputs.items()}
            state.on_output(d.node, d.iteration, fns[d.node](inputs))
            state.on_done(d.node, d.iteration)
        peak = max(peak, len(state.values), len(state.done), len(state.dispatched))
    return peak


def test_long_loops_release_iterations_after_their_last_use():
    nodes = [N("step", ("h",), ("h", "tok")), N("sink", ("toks", "last"), ("n",))]
    loop = Loop("l", "step", max_iters=300, carry=[E("step.h", "step.h")], accumulate=["step.tok"])
    walk = Walk("w", Sequential(loop, "sink"), [
        E("input.h", "step.h"), E("step.tok", "sink.toks"), E("step.h", "sink.last"), E("sink.n", "output.n")])
    WalkGraph("g", nodes, [walk])
    state = WalkState(WalkScope(walk), {"h": (torch.tensor([0]),)})
    fns = {"step": lambda i: {"h": i["h"] + 1, "tok": i["h"] * 2},
           "sink": lambda i: {"n": torch.tensor([len(i["toks"]), int(i["last"])])}}
    peak = drive(state, fns)
    assert state.is_complete
    assert state.take_emitted()[0][1].tolist() == [300, 300]  # all 300 accumulated tokens, last h
    assert peak < 320  # accumulated tokens stay (they are the loop's output); the rest is released
    assert len([k for k in state.values if k[1] == "h"]) <= 3
