"""Placement: deployment YAML -> (node, walk) -> service, validated against a graph."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conductor.placement import Placement
from conductor.service_spec import ServiceSpec
from graph.composites import Sequential
from graph.edge import GraphEdge
from core.errors import GraphError
from graph.node import GraphNode
from graph.walk import Walk, WalkGraph
from core.errors import InvalidArgument

DEPLOYMENTS = Path(__file__).resolve().parents[2] / "compose" / "deployments"
E = GraphEdge


def toy_graph() -> WalkGraph:
    """a -> b -> c with b stateful (walk `gen`), plus walk `edit` = a -> c."""
    nodes = tuple(GraphNode(n, inputs=("x",), outputs=("y",), stateful=n == "b") for n in "abc")
    gen = Walk("gen", Sequential("a", "b", "c"),
               (E("input.x", "a.x"), E("a.y", "b.x"), E("b.y", "c.x"), E("c.y", "output.y")))
    edit = Walk("edit", Sequential("a", "c"), (E("input.x", "a.x"), E("a.y", "c.x"), E("c.y", "output.y")))
    return WalkGraph("toy", nodes, (gen, edit), first_walk="gen")


def prefill_decode_graph() -> WalkGraph:
    """Two stateful nodes sharing one request's KV context, in two walks."""
    nodes = (
        GraphNode("prefill", inputs=("ids",), outputs=("tok",), stateful=True),
        GraphNode("decode", inputs=("tok",), outputs=("tok",), stateful=True),
        GraphNode("head", inputs=("tok",), outputs=("tok",)),
    )
    walks = (
        Walk("prefill", Sequential("prefill"), (E("input.ids", "prefill.ids"), E("prefill.tok", "output.tok"))),
        Walk("decode", Sequential("decode", "head"),
             (E("input.tok", "decode.tok"), E("decode.tok", "head.tok"), E("head.tok", "output.tok"))),
    )
    return WalkGraph("pd", nodes, walks, first_walk="prefill")


def deployment(**changes) -> dict:
    """A valid toy deployment dict; `changes` replace top-level keys."""
    d = {
        "model": "toy",
        "services": {
            "svc_a": {"replicas": ["127.0.0.1:50061"]},
            "svc_b": {"replicas": ["127.0.0.1:50062", "127.0.0.1:50063"], "device": "cuda:0"},
            "svc_c": {"replicas": ["127.0.0.1:50064"], "options": {"chunk": 4}},
        },
        "placement": {"a": "svc_a", "b": "svc_b", "c": "svc_c"},
    }
    d.update(changes)
    return d


def rejects(data, match: str, graph=None):
    """Building (and, with a graph, validating) `data` raises GraphError matching `match`."""
    with pytest.raises(GraphError, match=match):
        placement = Placement.from_dict(data)
        if graph is not None:
            placement.validate(graph)


# --- example deployments -----------------------------------------------------------


@pytest.mark.parametrize("name", ["toy-local.yaml", "toy-colocated.yaml"])
def test_example_deployments_validate(name):
    placement = Placement.from_yaml(DEPLOYMENTS / name)
    placement.validate(toy_graph())
    assert placement.model == "toy"
    assert Placement.from_yaml(str(DEPLOYMENTS / name)) == placement  # a path string works too


def test_colocation_in_the_examples():
    local = Placement.from_yaml(DEPLOYMENTS / "toy-local.yaml")
    colocated = Placement.from_yaml(DEPLOYMENTS / "toy-colocated.yaml")
    assert not local.is_colocated("b", "c", "gen")
    assert colocated.is_colocated("b", "c", "gen")
    assert not colocated.is_colocated("a", "b", "gen")
    assert colocated.components_of("svc_bc") == ("b", "c")
    assert len(local.services) == 3 and len(colocated.services) == 2


def test_service_for_and_fields():
    placement = Placement.from_dict(deployment())
    spec = placement.service_for("b", "gen")
    assert spec == placement.services["svc_b"]
    assert spec.replicas == ("127.0.0.1:50062", "127.0.0.1:50063") and spec.device == "cuda:0"
    assert placement.services["svc_a"].device == "cpu" and placement.services["svc_c"].options == {"chunk": 4}
    assert placement.components_of("svc_c") == ("c",)  # derived when not listed


def test_per_walk_override():
    d = deployment()
    d["services"]["svc_c2"] = {"replicas": ["127.0.0.1:50065"]}
    d["placement"]["c"] = {"default": "svc_c", "walks": {"edit": "svc_c2"}}
    placement = Placement.from_dict(d)
    placement.validate(toy_graph())
    assert placement.service_for("c", "gen").name == "svc_c"
    assert placement.service_for("c", "edit").name == "svc_c2"
    assert placement.components_of("svc_c2") == ("c",)


def test_override_without_default_places_only_its_walks():
    d = deployment()
    d["placement"]["c"] = {"walks": {"edit": "svc_c"}}
    assert Placement.from_dict(d).service_for("c", "edit").name == "svc_c"
    rejects(d, "unplaced node c in walk gen", toy_graph())


def test_placement_is_immutable():
    options = {"nested": {"k": 1}}
    spec = ServiceSpec("s", ("127.0.0.1:1",), options=options)
    options["nested"]["k"] = 2
    assert spec.options["nested"]["k"] == 1  # a private deep copy
    with pytest.raises(TypeError):
        spec.options["new"] = 1
    placement = Placement.from_dict(deployment())
    with pytest.raises(TypeError):
        placement.node_to_service["a"] = "svc_b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        placement.model = "other"


# --- validation errors -------------------------------------------------------------


def test_unplaced_node():
    assert issubclass(GraphError, InvalidArgument)  # INVALID_ARGUMENT at the gRPC edge
    d = deployment(placement={"a": "svc_a", "b": "svc_b"})
    rejects(d, "unplaced node c in walk gen", toy_graph())
    with pytest.raises(GraphError, match="unplaced node c in walk edit"):
        Placement.from_dict(d).service_for("c", "edit")


def test_unknown_service():
    rejects(deployment(placement={"a": "svc_a", "b": "svc_b", "c": "svc_z"}), "node c: unknown service svc_z")
    d = deployment()
    d["placement"]["c"] = {"default": "svc_c", "walks": {"edit": "svc_y"}}
    rejects(d, "node c in walk edit: unknown service svc_y")


def test_duplicate_endpoint_across_services():
    d = deployment()
    d["services"]["svc_c"]["replicas"] = ["127.0.0.1:50064", "127.0.0.1:50062"]
    rejects(d, "duplicate port/endpoint 127.0.0.1:50062 in services svc_b and svc_c")


def test_duplicate_endpoint_in_one_service():
    d = deployment()
    d["services"]["svc_a"]["replicas"] = ["127.0.0.1:50061", "127.0.0.1:50061"]
    rejects(d, "duplicate endpoint 127.0.0.1:50061 in service svc_a")


def test_service_needs_a_replica():
    d = deployment()
    d["services"]["svc_a"]["replicas"] = []
    rejects(d, "service svc_a: needs at least one replica")


@pytest.mark.parametrize("endpoint", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", ":50061", "host:port"])
def test_bad_endpoint(endpoint):
    d = deployment()
    d["services"]["svc_a"]["replicas"] = [endpoint]
    rejects(d, f"service svc_a: replica endpoint '{endpoint}' is not 'host:port'")


def test_stateful_node_split_across_walks_is_rejected():
    toy = toy_graph()  # `edit` does not run b: add a walk `refine` that does
    refine = Walk("refine", Sequential("b"), (E("input.x", "b.x"), E("b.y", "output.y")))
    graph = WalkGraph("toy", toy.nodes, toy.walks + (refine,), first_walk="gen")
    d = deployment()
    d["services"]["svc_b2"] = {"replicas": ["127.0.0.1:50066"]}
    d["placement"]["b"] = {"default": "svc_b", "walks": {"refine": "svc_b2"}}
    rejects(d, r"stateful node b: b runs on service svc_b in walk gen but on service svc_b2 in walk refine"
               r".*KV transfer between replicas is not supported\): place b on one service in every walk", graph)
    d["placement"]["b"] = {"default": "svc_b", "walks": {"refine": "svc_b"}}  # same service: fine
    Placement.from_dict(d).validate(graph)


def test_stateless_node_may_move_between_walks():
    d = deployment()
    d["placement"]["c"] = {"default": "svc_c", "walks": {"edit": "svc_a"}}
    Placement.from_dict(d).validate(toy_graph())


def pd_deployment(decode_service: str) -> dict:
    return {
        "services": {
            "thinker": {"replicas": ["127.0.0.1:50061", "127.0.0.1:50062"]},
            "thinker_b": {"replicas": ["127.0.0.1:50063"]},
        },
        "placement": {"prefill": "thinker", "decode": decode_service, "head": "thinker_b"},
        "kv_contexts": {"thinker_ctx": ["prefill", "decode"]},
    }


def test_kv_context_group_on_one_service():
    placement = Placement.from_dict(pd_deployment("thinker"))
    placement.validate(prefill_decode_graph())
    assert placement.kv_context_of("decode") == "thinker_ctx" and placement.kv_context_of("head") is None


def test_kv_context_split_is_rejected():
    rejects(pd_deployment("thinker_b"),
            r"kv_context thinker_ctx: prefill runs on service thinker in walk prefill but decode on service "
            r"thinker_b in walk decode.*KV transfer between replicas is not supported\): "
            r"place prefill, decode on one service in every walk", prefill_decode_graph())


def test_kv_context_errors():
    d = pd_deployment("thinker")
    d["kv_contexts"] = {"ctx": ["prefill", "head"]}
    rejects(d, "kv_context ctx: node head is not stateful", prefill_decode_graph())
    d["kv_contexts"] = {"ctx": ["prefill", "nope"]}
    rejects(d, "kv_context ctx: unknown node nope", prefill_decode_graph())
    d["kv_contexts"] = {"one": ["prefill"], "two": ["prefill", "decode"]}
    rejects(d, "node prefill is in kv_contexts one and two")
    d["kv_contexts"] = {"ctx": []}
    rejects(d, "kv_context ctx: lists no nodes")


def test_components_must_host_placed_nodes():
    d = deployment()
    d["services"]["svc_b"]["components"] = ["b"]
    d["placement"]["c"] = "svc_b"
    rejects(d, r"node c: placed on service svc_b, which does not host it \(components: \['b'\]\)")


def test_component_not_in_graph():
    d = deployment()
    d["services"]["svc_c"]["components"] = ["c", "vae"]
    rejects(d, "service svc_c: component vae is not a node of graph toy", toy_graph())


def test_names_checked_against_the_graph():
    d = deployment()
    d["placement"]["zz"] = "svc_a"
    rejects(d, "placement names node zz, which graph toy does not have", toy_graph())
    d = deployment()
    d["placement"]["c"] = {"default": "svc_c", "walks": {"nowalk": "svc_c"}}
    rejects(d, "node c: override for unknown walk nowalk", toy_graph())
    d["placement"]["b"] = {"default": "svc_b", "walks": {"edit": "svc_b"}}
    d["placement"]["c"] = "svc_c"
    rejects(d, "node b: override for walk edit, which does not run it", toy_graph())
    rejects(deployment(model="other"), "deployment is for model other, graph is toy", toy_graph())


# --- YAML loading ----------------------------------------------------------------


def test_yaml_text_round_trip():
    text = (DEPLOYMENTS / "toy-local.yaml").read_text()
    assert Placement.from_yaml(text) == Placement.from_yaml(DEPLOYMENTS / "toy-local.yaml")


@pytest.mark.parametrize("data, match", [
    ({"placement": {}}, "deployment: missing key 'services'"),
    ({"services": {"s": {"replicas": ["127.0.0.1:1"]}}}, "deployment: missing key 'placement'"),
    ({"services": {}, "placement": {}}, "deployment: services is empty"),
    ([1, 2], "deployment must be a mapping, got list"),
])
def test_yaml_structure_errors(data, match):
    rejects(data, match)


def test_replicas_not_a_list():
    d = deployment()
    d["services"]["svc_a"]["replicas"] = "127.0.0.1:50061"
    rejects(d, "service svc_a: replicas must be a list, got str")
    d["services"]["svc_a"] = {"device": "cpu"}
    rejects(d, "service svc_a: missing key 'replicas'")
    d["services"]["svc_a"] = {"replicas": [50061]}
    rejects(d, "service svc_a: replicas: 50061 is not a string")


def test_unknown_keys_are_named():
    rejects(deployment(servces={}), "deployment: unknown key 'servces'")
    d = deployment()
    d["services"]["svc_a"]["replica"] = ["127.0.0.1:1"]
    rejects(d, "service svc_a: unknown key 'replica'")
    d = deployment()
    d["placement"]["c"] = {"default": "svc_c", "walk": {"edit": "svc_c"}}
    rejects(d, "placement c: unknown key 'walk'")


def test_yaml_syntax_and_file_errors(tmp_path):
    with pytest.raises(GraphError, match="deployment: invalid YAML"):
        Placement.from_yaml("services: [\n")
    with pytest.raises(GraphError, match="deployment file .*missing.yaml"):
        Placement.from_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  s: {replicas: [a:1]}\nplacement: {}\nextra: 1\n")
    with pytest.raises(GraphError, match="deployment: unknown key 'extra'"):
        Placement.from_yaml(str(bad))
