"""WalkState without I/O: driven by hand like an engine would."""
import torch

from conductor.walk_scope import WalkScope
from conductor.walk_state import WalkState
from graph.chunking import LeftContext
from graph.composites import Loop, Sequential
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph
from runtime.items import ChunkInfo


def drive(state, fns, max_rounds=10_000, seen=None):
    peak = 0
    for _ in range(max_rounds):
        dispatches = state.ready()
        if not dispatches:
            break
        for d in dispatches:
            if seen is not None:
                seen.append(d)
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


def frames_to_codec(inner_loops=frozenset()):
    """lm loops 5 times, streaming each frame to codec in LeftContext(3, 2) chunks."""
    nodes = [N("lm", ("n",), ("frame",)), N("codec", ("frames",), ("audio",))]
    loop = Loop("gen", "lm", max_iters=5, carry=[E("lm.frame", "lm.n")])
    stream = StreamingGraphEdge("lm.frame", "codec.frames", chunk_policy=LeftContext(3, 2))
    walk = Walk("w", Sequential(loop, "codec"), [E("input.n", "lm.n"), stream, E("codec.audio", "output.audio")])
    WalkGraph("g", nodes, [walk])
    return walk, loop, stream


def test_chunk_fed_runs_carry_their_place_in_the_stream():
    walk, _, _ = frames_to_codec()
    state = WalkState(WalkScope(walk), {"n": (torch.tensor([0]),)})
    seen = []
    drive(state, {"lm": lambda i: {"frame": i["n"] + 1}, "codec": lambda i: {"audio": i["frames"]}}, seen=seen)
    assert state.is_complete
    chunks = [(d.iteration, d.chunk) for d in seen if d.node == "codec"]
    assert chunks == [((0,), ChunkInfo(start=0, num_context=0, is_last=False)),
                      ((1,), ChunkInfo(start=1, num_context=2, is_last=True))]
    assert all(d.chunk is None for d in seen if d.node == "lm")


def test_scope_indexes_edges_loops_and_streams_by_node():
    walk, loop, stream = frames_to_codec()
    scope = WalkScope(walk)
    assert scope.in_edges == {"lm": {"n": E("input.n", "lm.n")}, "codec": {"frames": stream}}
    assert scope.out_edges == {"lm": [stream], "codec": [E("codec.audio", "output.audio")]}
    assert scope.carry_in == {"lm": {"n": E("lm.frame", "lm.n")}, "codec": {}}
    assert scope.inner == {} and scope.stream_in == {"codec": stream} and scope.pushed == {}
    assert scope.child_loops(None) == [loop] and scope.child_loops(loop) == []
    assert scope.direct_members(loop) == ["lm"] and scope.loop_depth(loop) == 0
    assert (scope.depth("lm"), scope.depth("codec"), scope.common("lm", "codec")) == (1, 0, 0)
    inner = WalkScope(walk, frozenset({"gen"}), can_route=lambda src, dst, w: True)
    assert inner.inner == {"lm": loop} and inner.depth("lm") == 0
    assert inner.routed_in == {"codec": stream} and inner.routed_out == {"lm": [stream], "codec": []}
    assert inner.routed_push == {} and inner.routed == {stream} and inner.quiet_ports["lm"] == ("frame",)
    assert WalkScope(walk, frozenset({"gen"})).routed == frozenset()  # nothing routes unless it can


def test_ports_read_only_by_outputs_the_client_does_not_take_stay_on_their_service():
    from pipelines.orpheus.graph import INNER_LOOPS, orpheus_graph

    walk = orpheus_graph().walks[0]
    scope = WalkScope(walk, INNER_LOOPS, can_route=lambda src, dst, w: True)
    assert scope.quiet_for("codes") == ()  # the client takes output.codes
    assert scope.quiet_for("codes", frozenset({"codes"})) == ("codes",)  # else only the routed snac reads them
    assert scope.quiet_for("decode", frozenset({"codes"})) == ()  # output.token still reads decode.token
    # the decode loop's stop rule runs in its service, so its watch does not keep the port
    assert scope.quiet_for("decode", frozenset({"token", "codes"})) == ("token",)
    assert scope.quiet_for("prefill", frozenset(walk.output_names)) == ()  # the conductor opens decode with it
    # no client room is reserved for what the client does not take
    ids = {"input_ids": (torch.tensor([1]),)}
    assert set(WalkState(scope, ids).credits.initial("codes", ())) == {"codes"}
    assert WalkState(scope, ids, silent=frozenset({"codes"})).credits.initial("codes", ()) == {}


def _per_item_stream(n: int):
    """gen loops n times; each frame streams (FixedChunk(1)) to sink, whose z goes to the client."""
    from graph.chunking import FixedChunk

    nodes = [N("lm", ("n",), ("frame",)), N("sink", ("y",), ("z",))]
    loop = Loop("gen", "lm", max_iters=n, carry=[E("lm.frame", "lm.n")])
    stream = StreamingGraphEdge("lm.frame", "sink.y", chunk_policy=FixedChunk(1))
    walk = Walk("w", Sequential(loop, "sink"), [E("input.n", "lm.n"), stream, E("sink.z", "output.z")])
    WalkGraph("g", nodes, [walk])
    return walk


def test_a_client_only_node_streams_its_outputs_without_keeping_one_per_item():
    walk = _per_item_stream(200)
    fns = {"lm": lambda i: {"frame": i["n"] + 1}, "sink": lambda i: {"z": i["y"] * 10}}
    kept, streamed = WalkState(WalkScope(walk), {"n": (torch.tensor([0]),)}), []
    state = WalkState(WalkScope(walk), {"n": (torch.tensor([0]),)}, keep_outputs=False)
    assert "sink" in state.scope.client_only
    for s, out in ((kept, []), (state, streamed)):
        for _ in range(10_000):
            dispatches = s.ready()
            if not dispatches:
                break
            for d in dispatches:
                inputs = {k: torch.cat(list(v)) for k, v in d.inputs.items()}
                s.on_output(d.node, d.iteration, fns[d.node](inputs))
                s.on_done(d.node, d.iteration)
            out += s.take_emitted()
        assert s.is_complete
    assert [int(v) for _, v in streamed] == [10 * k for k in range(1, 201)]  # every item reached the client
    assert len(kept.outputs["z"]) == 200 and state.outputs == {}  # kept only when a later walk may read them
    assert not [k for k in state.values if k[0] == "sink"]  # no run reads them: none held per item
    assert len(state.timer.stamps) < 10


def test_a_loop_inside_a_component_exits_at_its_last_output_and_later_ones_are_dropped():
    """The loop's client-only outputs are not kept, yet its end still knows its last
    iteration: an output that arrives after the loop's NodeDone is never shown."""
    nodes = [N("lm", ("n",), ("tok",))]
    loop = Loop("gen", "lm", max_iters=100, carry=[E("lm.tok", "lm.n")])
    walk = Walk("w", Sequential(loop), [E("input.n", "lm.n"), E("lm.tok", "output.tok")])
    WalkGraph("g", nodes, [walk])
    state = WalkState(WalkScope(walk, frozenset({"gen"})), {"n": (torch.tensor([0]),)}, keep_outputs=False)
    (d,) = state.ready()  # the loop run, opened once
    assert "lm" in state.scope.client_only
    for k in range(5):
        state.on_output("lm", d.iteration + (k,), {"tok": torch.tensor([k])})
    state.on_done("lm", d.iteration)
    state.on_output("lm", d.iteration + (5,), {"tok": torch.tensor([5])})  # late: past the loop's end
    assert [int(v) for _, v in state.take_emitted()] == [0, 1, 2, 3, 4]
    assert state.loops.finished[("gen", d.iteration)] == 4 and state.is_complete
    assert not state.values  # nothing held per item
