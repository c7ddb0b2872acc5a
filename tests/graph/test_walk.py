"""Walks (body, loop paths, inputs/outputs) and the model state machine."""
from __future__ import annotations

import re

import pytest

from graph.composites import DynamicLoop, Loop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from core.errors import GraphError
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph


def raises(match: str):
    return pytest.raises(GraphError, match=re.escape(match))


def nested_walk() -> Walk:
    inner = Loop("inner", Sequential("d", "e"), max_iters=2)
    outer = DynamicLoop("outer", "c", inner, max_iters=5, stop=StopRule("e.v", stop_token_ids=(1,)))
    body = Sequential("a", Parallel("b", outer))
    edges = (E("input.x", "a.x"), E("input.x", "b.x"), E("input.p", "c.x"),
             E("a.v", "output.first"), E("e.v", "output.last"), E("b.v", "output.first_b"))
    return Walk("w", body, edges)


def test_node_names_in_declaration_order():
    assert nested_walk().node_names == ["a", "b", "c", "d", "e"]
    assert Walk("one", "a").node_names == ["a"]


def test_loop_path_outermost_first():
    walk = nested_walk()
    assert walk.loop_path("a") == () and walk.loop_path("b") == ()
    assert [lp.name for lp in walk.loop_path("c")] == ["outer"]
    assert [lp.name for lp in walk.loop_path("d")] == ["outer", "inner"]
    assert [lp.name for lp in walk.loop_path("e")] == ["outer", "inner"]
    assert walk.loop_path("e")[0] is walk.loop_path("c")[0]  # the same Loop object
    assert walk.loop_path("input") == ()


def test_loops_with_their_enclosing_loops():
    loops = [(lp.name, [o.name for o in outer]) for lp, outer in nested_walk().loops]
    assert loops == [("outer", []), ("inner", ["outer"])]


def test_input_and_output_names_sorted_and_unique():
    walk = nested_walk()
    assert walk.input_names == ["p", "x"]
    assert walk.output_names == ["first", "first_b", "last"]
    assert Walk("empty", "a").input_names == [] and Walk("empty", "a").output_names == []


def test_walk_name_must_be_an_identifier():
    with raises("walk name 'image-gen' is not an identifier"):
        Walk("image-gen", "a")


def model(first_walk="prefill", next_walk=None) -> WalkGraph:
    nodes = (GraphNode("lm", ("tok",), ("tok",), stateful=True), GraphNode("vit", ("image",), ("tok",)))
    walks = (
        Walk("prefill", "lm", (E("input.tok", "lm.tok"), E("lm.tok", "output.tok"))),
        Walk("image_prefill", Sequential("vit", "lm"), (E("input.image", "vit.image"), E("vit.tok", "lm.tok"),
                                                         E("lm.tok", "output.tok"))),
        Walk("decode", Loop("steps", "lm", max_iters=4, carry=[E("lm.tok", "lm.tok")]),
             (E("input.tok", "lm.tok"), E("lm.tok", "output.tok"))),
    )
    kwargs = {} if next_walk is None else {"next_walk": next_walk}
    return WalkGraph("toy", nodes, walks, first_walk=first_walk, **kwargs)


def prefill_then_decode(inputs, walk, outputs):
    return "decode" if walk.endswith("prefill") and outputs.get("tok") != 0 else None


def test_state_machine_runs_walks_in_order():
    graph = model(lambda inputs, wanted: "image_prefill" if "image" in inputs else "prefill", prefill_then_decode)
    assert graph.start({"tok": 5}) == "prefill"
    assert graph.start({"image": 1}) == "image_prefill"
    seen, walk = [], graph.start({"tok": 5})
    while walk is not None:
        seen.append(walk)
        walk = graph.after({"tok": 5}, walk, {"tok": 7})
    assert seen == ["prefill", "decode"]
    assert graph.after({}, "prefill", {"tok": 0}) is None  # the outputs decide too


def test_single_walk_defaults_and_ends():
    graph = WalkGraph("one", (GraphNode("a", (), ("y",)),), (Walk("only", "a", (E("a.y", "output.y"),)),))
    assert graph.first_walk == "only" and graph.start({}) == "only"
    assert graph.after({}, "only", {"y": 1}) is None
    assert graph.node_by_name["a"].outputs == ("y",) and set(graph.walk_by_name) == {"only"}


def test_unknown_first_walk_from_a_function():
    graph = model(lambda inputs, wanted: "video_prefill")
    with raises("graph toy: first walk 'video_prefill' is not a walk"):
        graph.start({})


def test_unknown_next_walk():
    graph = model(next_walk=lambda inputs, walk, outputs: "detokenize")
    with raises("graph toy: next walk 'detokenize' after 'prefill' is not a walk"):
        graph.after({}, "prefill", {})
    with raises("graph toy: finished walk 'prefil' is not a walk"):
        model().after({}, "prefil", {})


def test_unknown_first_walk_name_is_caught_when_built():
    with raises("graph toy: first_walk 'video_prefill' is not a walk"):
        model("video_prefill")
