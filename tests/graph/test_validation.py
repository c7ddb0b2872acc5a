"""Graph validation when a WalkGraph is built: invalid graphs raise a GraphError
naming the culprit; the reference graphs (pipeline, loops, CFG) pass."""
from __future__ import annotations

import re

import pytest

from graph.chunking import FixedChunk, LeftContext
from graph.composites import DynamicLoop, Loop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge, StreamingGraphEdge
from core.errors import GraphError
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph

E = GraphEdge


def node(name: str, inputs: str = "", outputs: str = "", **kw) -> GraphNode:
    return GraphNode(name, tuple(inputs.split()), tuple(outputs.split()), **kw)


def one_walk(nodes, body, edges, name: str = "w") -> WalkGraph:
    return WalkGraph("g", tuple(nodes), (Walk(name, body, tuple(edges)),))


def raises(match: str):
    return pytest.raises(GraphError, match=re.escape(match))


# ---- valid graphs --------------------------------------------------------------

def pipeline() -> WalkGraph:
    nodes = [node("thinker", "prompt", "hidden"), node("talker", "hidden", "codes"),
             node("code2wav", "codes", "audio")]
    edges = [E("input.prompt", "thinker.prompt"),
             StreamingGraphEdge("thinker.hidden", "talker.hidden", FixedChunk(1), continue_after_producer_done=True),
             StreamingGraphEdge("talker.codes", "code2wav.codes", LeftContext(4, 2)),
             E("code2wav.audio", "output.audio")]
    return one_walk(nodes, Sequential("thinker", "talker", "code2wav"), edges, "speech")


def cfg() -> WalkGraph:
    nodes = [node("encode", "prompt", "ctx z0"), node("cond", "ctx z", "eps"), node("uncond", "z", "eps"),
             node("combine", "c u", "z"), node("vae", "z", "image")]
    denoise = Loop("denoise", Sequential(Parallel("cond", "uncond"), "combine"), max_iters=4,
                   carry=[E("combine.z", "cond.z"), E("combine.z", "uncond.z")])
    edges = [E("input.prompt", "encode.prompt"), E("encode.ctx", "cond.ctx"),
             E("encode.z0", "cond.z"), E("encode.z0", "uncond.z"),  # iteration 0 enters the loop
             E("cond.eps", "combine.c"), E("uncond.eps", "combine.u"),
             E("combine.z", "vae.z"), E("vae.image", "output.image")]
    return one_walk(nodes, Sequential("encode", denoise, "vae"), edges, "image_gen")


def test_three_stage_streaming_pipeline_is_valid():
    graph = pipeline()
    assert graph.start({}) == "speech"
    assert graph.walks[0].output_names == ["audio"]


def test_loop_with_carry_and_accumulate_is_valid():
    loop = Loop("decode", "step", max_iters=8, carry=[E("step.tok", "step.tok")], accumulate=["step.tok"])
    one_walk([node("step", "tok", "tok")], loop, [E("input.tok", "step.tok"), E("step.tok", "output.tokens")])


def test_dynamic_loop_with_stop_rule_is_valid():
    loop = DynamicLoop("decode", Sequential("lm", "sample"), max_iters=16,
                       stop=StopRule("sample.tok", stop_token_ids=(0,)), carry=[E("sample.tok", "lm.tok")])
    edges = [E("input.tok", "lm.tok"), E("lm.logits", "sample.logits"), E("sample.tok", "output.tokens")]
    one_walk([node("lm", "tok", "logits"), node("sample", "logits", "tok")], loop, edges)


def test_parallel_join_inside_a_loop_is_valid():
    graph = cfg()
    assert [lp.name for lp in graph.walks[0].loop_path("combine")] == ["denoise"]


def test_walk_without_outputs_is_allowed():
    graph = one_walk([node("prefill", "prompt", "kv", stateful=True)], "prefill", [E("input.prompt", "prefill.prompt")])
    assert graph.walks[0].output_names == []


def test_carry_only_port_is_accepted():
    # A carry counts as feeding the port (a loop run inside a component seeds it).
    loop = Loop("decode", "step", max_iters=3, carry=[E("step.tok", "step.tok")])
    one_walk([node("step", "tok", "tok")], loop, [E("step.tok", "output.tok")])


# ---- structure -----------------------------------------------------------------

def test_unknown_node_in_walk_body():
    with raises("walk w: unknown node 'ghost'"):
        one_walk([node("a", "", "y")], Sequential("a", "ghost"), [])


def test_node_twice_in_one_walk_body():
    with raises("walk w: node 'a' appears twice in the body"):
        one_walk([node("a", "", "y"), node("b")], Sequential("a", Parallel("b", "a")), [])


def test_duplicate_node_names_in_graph():
    with raises("graph g: duplicate node name 'a'"):
        WalkGraph("g", (node("a", "", "y"), node("a", "x", "y")), (Walk("w", "a"),))


def test_duplicate_walk_names():
    with raises("graph g: duplicate walk name 'w'"):
        WalkGraph("g", (node("a"),), (Walk("w", "a"), Walk("w", "a")), first_walk="w")


def test_duplicate_loop_names_in_one_walk():
    body = Sequential(Loop("L", "a", max_iters=2), Loop("L", "b", max_iters=2))
    with raises("walk w: two loops named 'L'"):
        one_walk([node("a"), node("b")], body, [])


def test_parallel_required_names_a_branch():
    with raises("walk w: Parallel required branch 'c'"):
        one_walk([node("a"), node("b")], Parallel("a", "b", required=("a", "c")), [])


def test_body_must_be_a_name_or_composite():
    with raises("walk w: body"):
        one_walk([node("a")], node("a"), [])


def test_first_walk_naming_a_missing_walk():
    with raises("graph g: first_walk 'gen' is not a walk"):
        WalkGraph("g", (node("a"),), (Walk("w", "a"), Walk("v", "a")), first_walk="gen")


def test_first_walk_required_with_several_walks():
    with raises("graph g: first_walk is required with 2 walks"):
        WalkGraph("g", (node("a"),), (Walk("w", "a"), Walk("v", "a")))


# ---- edges and ports -----------------------------------------------------------

AB = [node("a", "x", "y"), node("b", "y", "z")]


@pytest.mark.parametrize("edge, message", [
    (E("ghost.y", "b.y"), "walk w: edge ghost.y -> b.y: unknown node 'ghost'"),
    (E("a.y", "ghost.y"), "walk w: edge a.y -> ghost.y: unknown node 'ghost'"),
    (E("c.y", "b.y"), "walk w: edge c.y -> b.y: node 'c' is not in the walk's body"),
    (E("a.x", "b.y"), "walk w: edge a.x -> b.y: a has no output 'x'"),
    (E("a.y", "b.z"), "walk w: edge a.y -> b.z: b has no input 'z'"),
    (E("output.y", "b.y"), "walk w: edge output.y -> b.y: a walk output cannot be a source"),
    (E("a.y", "input.y"), "walk w: edge a.y -> input.y: a walk input cannot be a destination"),
])
def test_edge_with_unknown_node_or_port(edge, message):
    with raises(message):
        one_walk(AB + [node("c", "", "y")], Sequential("a", "b"), [E("input.x", "a.x"), edge])


def test_input_port_fed_by_two_edges():
    edges = [E("input.x", "a.x"), E("input.y", "b.y"), E("a.y", "b.y")]
    with raises("walk w: duplicate port b.y: fed by input.y -> b.y and a.y -> b.y"):
        one_walk(AB, Sequential("a", "b"), edges)


def test_walk_output_fed_by_two_edges():
    edges = [E("input.x", "a.x"), E("a.y", "b.y"), E("a.y", "output.o"), E("b.z", "output.o")]
    with raises("walk w: duplicate port output.o: fed by a.y -> output.o and b.z -> output.o"):
        one_walk(AB, Sequential("a", "b"), edges)


def test_port_fed_by_two_carries():
    loop = Loop("L", Sequential("a", "b"), max_iters=2, carry=[E("b.z", "a.x"), E("a.y", "a.x")])
    with raises("walk w: duplicate port a.x: fed by carries b.z -> a.x and a.y -> a.x"):
        one_walk([node("a", "x", "y"), node("b", "y", "z")], loop, [E("input.x", "a.x"), E("a.y", "b.y")])


def test_carried_port_fed_from_inside_the_loop():
    loop = Loop("L", Sequential("a", "b"), max_iters=2, carry=[E("b.z", "b.y")])
    with raises("walk w: duplicate port b.y: fed by carry b.z -> b.y of loop L and by edge a.y -> b.y"):
        one_walk([node("a", "x", "y"), node("b", "y", "z")], loop, [E("input.x", "a.x"), E("a.y", "b.y")])


def test_input_produced_by_no_edge():
    nodes = [node("a", "x", "y"), node("b", "y cond", "z")]
    with raises("input b.cond is produced by no edge in walk w"):
        one_walk(nodes, Sequential("a", "b"), [E("input.x", "a.x"), E("a.y", "b.y")])


def test_input_fed_in_another_walk_only_is_still_unfed():
    nodes = (node("a", "x", "y"),)
    walks = (Walk("ok", "a", (E("input.x", "a.x"),)), Walk("bad", "a", ()))
    with raises("input a.x is produced by no edge in walk bad"):
        WalkGraph("g", nodes, walks, first_walk="ok")


# ---- cycles --------------------------------------------------------------------

def test_cycle_outside_loops_names_an_edge_of_it():
    nodes = [node("a", "x back", "y"), node("b", "y", "z"), node("c", "z", "w")]
    edges = [E("input.x", "a.x"), E("a.y", "b.y"), E("b.z", "c.z"), E("c.w", "a.back")]
    with raises("walk w: edge c.w -> a.back closes a cycle a -> b -> c -> a outside any loop"):
        one_walk(nodes, Sequential("a", "b", "c"), edges)


def test_self_edge_is_a_cycle():
    with raises("walk w: edge a.y -> a.x closes a cycle a -> a"):
        one_walk([node("a", "x", "y")], "a", [E("a.y", "a.x")])


def test_back_edge_inside_a_loop_must_be_a_carry():
    nodes = [node("a", "x back", "y"), node("b", "y", "z")]
    edges = [E("input.x", "a.x"), E("a.y", "b.y"), E("b.z", "a.back")]
    with raises("walk w: edge b.z -> a.back closes a cycle a -> b -> a"):
        one_walk(nodes, Loop("L", Sequential("a", "b"), max_iters=3), edges)
    # the same back edge declared as the loop's carry is fine
    loop = Loop("L", Sequential("a", "b"), max_iters=3, carry=[E("b.z", "a.back")])
    one_walk(nodes, loop, edges[:2])


# ---- loops ---------------------------------------------------------------------

@pytest.mark.parametrize("max_iters", [0, -1, None, 2.5, True])
def test_loop_needs_a_positive_bound(max_iters):
    with raises("loop L: max_iters must be a positive bound"):
        Loop("L", "a", max_iters=max_iters)
    with raises("loop L: max_iters must be a positive bound"):
        DynamicLoop("L", "a", max_iters=max_iters, stop=StopRule("a.y", stop_token_ids=(0,)))


def test_dynamic_loop_needs_a_stop_rule_with_a_watch():
    with raises("loop L: DynamicLoop needs a StopRule with a watch port"):
        DynamicLoop("L", "a", max_iters=4, stop=StopRule())
    with raises("loop L: DynamicLoop needs a StopRule with a watch port"):
        DynamicLoop("L", "a", max_iters=4, stop=StopRule(stop_token_ids=(0,)))
    # A node run's copy of the rule (runtime.items.OpenNode.stop_rule) has no watch.
    assert StopRule(stop_token_ids=[3], component_predicate="p").stop_token_ids == (3,)


def loop_graph(loop, extra_nodes=(), extra_edges=()):
    nodes = [node("pre", "x", "x"), node("a", "x", "y"), *extra_nodes]
    edges = [E("input.x", "pre.x"), E("pre.x", "a.x"), *extra_edges]
    return one_walk(nodes, Sequential("pre", loop), edges)


def test_carry_end_outside_the_loop():
    with raises("walk w: loop L: carry a.y -> pre.x: node 'pre' is not inside the loop"):
        loop_graph(Loop("L", "a", max_iters=2, carry=[E("a.y", "pre.x")]))


def test_carry_with_unknown_port():
    with raises("walk w: loop L: carry a.x -> a.x: a has no output 'x'"):
        loop_graph(Loop("L", "a", max_iters=2, carry=[E("a.x", "a.x")]))


def test_stop_watch_must_be_an_output_inside_the_loop():
    with raises("walk w: loop L: stop watch pre.x: node 'pre' is not inside the loop"):
        loop_graph(DynamicLoop("L", "a", max_iters=2, stop=StopRule("pre.x", stop_token_ids=(0,))))
    with raises("walk w: loop L: stop watch a.x: a has no output 'x'"):
        loop_graph(DynamicLoop("L", "a", max_iters=2, stop=StopRule("a.x", stop_token_ids=(0,))))


def test_accumulate_must_be_an_output_inside_the_loop():
    with raises("walk w: loop L: accumulate pre.x: node 'pre' is not inside the loop"):
        loop_graph(Loop("L", "a", max_iters=2, accumulate=["pre.x"]))
    with raises("walk w: loop L: accumulate a.q: a has no output 'q'"):
        loop_graph(Loop("L", "a", max_iters=2, accumulate=["a.q"]))


def test_edges_between_sibling_loops_are_valid():
    # A's exit value serves every iteration of B (thinker loop -> talker loop streams do the same)
    body = Sequential(Loop("A", "a", max_iters=2), Loop("B", "b", max_iters=2))
    one_walk(AB, body, [E("input.x", "a.x"), E("a.y", "b.y")])
    outer = Loop("O", Loop("A", "a", max_iters=2), Loop("B", "b", max_iters=2), max_iters=2)
    one_walk(AB, outer, [E("input.x", "a.x"), E("a.y", "b.y")])


def test_edges_into_and_out_of_nested_loops_are_valid():
    # entering O then I (a value from outside serves every iteration), leaving I to O
    inner = Loop("I", "b", max_iters=2, accumulate=["b.z"])
    nodes = AB + [node("c", "z", "w")]
    edges = [E("input.x", "a.x"), E("a.y", "b.y"), E("b.z", "c.z"), E("c.w", "output.w")]
    one_walk(nodes, Sequential("a", Loop("O", inner, "c", max_iters=3)), edges)
