"""Graph validation of streaming inputs and of loops that run inside their component:
invalid graphs raise a GraphError naming the walk, loop or node."""
from __future__ import annotations

from graph.composites import DynamicLoop, Loop, Sequential, StopRule
from graph.edge import StreamingGraphEdge
from graph.validate import validate_inner_loops
from graph.walk import Walk
from tests.graph.test_validation import E, node, one_walk, raises


def test_a_node_takes_at_most_one_streaming_input():
    nodes = [node("a", "x", "y z"), node("b", "y z", "w")]
    edges = [E("input.x", "a.x"), StreamingGraphEdge("a.y", "b.y"), StreamingGraphEdge("a.z", "b.z")]
    with raises("walk w: node b has several streaming inputs"):
        one_walk(nodes, Sequential("a", "b"), edges)
    one_walk(nodes, Sequential("a", "b"), [E("input.x", "a.x"), StreamingGraphEdge("a.y", "b.y"), E("a.z", "b.z")])


def test_a_component_stop_predicate_needs_the_loop_inside_its_component():
    loop = DynamicLoop("gen", "a", max_iters=4, stop=StopRule("a.y", component_predicate="eos"))
    graph = one_walk([node("a", "x", "y")], loop, [E("input.x", "a.x"), E("a.y", "output.y")])
    validate_inner_loops(graph, {"gen"})
    with raises("walk w: loop gen: a component stop predicate needs the loop to run inside its component"):
        validate_inner_loops(graph, set())


def test_a_carry_only_port_needs_the_loop_inside_its_component():
    loop = Loop("decode", "step", max_iters=3, carry=[E("step.tok", "step.tok")])
    graph = one_walk([node("step", "tok", "tok")], loop, [E("step.tok", "output.tok")])
    validate_inner_loops(graph, {"decode"})
    with raises("walk w: loop decode: carried port step.tok has no edge for iteration 0"):
        validate_inner_loops(graph, set())
    # A loop over two nodes never runs inside one component, named or not.
    pair = Loop("decode", Sequential("step", "emit"), max_iters=3, carry=[E("step.tok", "step.tok")])
    graph = one_walk([node("step", "tok", "tok"), node("emit", "tok", "out")], pair,
                     [E("step.tok", "emit.tok"), E("emit.out", "output.out")])
    with raises("walk w: loop decode: carried port step.tok has no edge for iteration 0"):
        validate_inner_loops(graph, {"decode"})


def test_component_loops_are_the_named_one_node_loops_without_a_conductor_predicate():
    one = Loop("one", "a", max_iters=2)
    two = Loop("two", Sequential("b", "c"), max_iters=2)
    judged = DynamicLoop("judged", "d", max_iters=2, stop=StopRule("d.y", predicate=bool))
    walk = Walk("w", Sequential(one, two, judged))
    assert walk.component_loops(frozenset({"one", "two", "judged"})) == {"a": one}
    assert walk.component_loops(frozenset()) == {}
