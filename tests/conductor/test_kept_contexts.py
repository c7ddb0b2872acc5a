"""Kept contexts on the conductor: owners from credentials, what runs are told, where a
continued context routes, and the wire form of a context use."""
import pytest
from hypothesis import given, strategies as st

from conductor.kept_contexts import END_USER, ContextDirectory, KeptContexts, owner_of, uses_for
from conductor.placement import Placement
from conductor.replicas import ReplicaSelector
from core.context_use import ContextParams, ContextUse, new_context_id
from core.errors import InvalidArgument
from graph.node import GraphNode
from runtime.item_proto import Rejected, items_to_proto, request_from_proto
from runtime.items import OpenNode


def test_owner_is_the_key_hash_and_end_user_never_the_key():
    a = owner_of((("authorization", "Bearer secret-a"), (END_USER, "alice")))
    b = owner_of((("authorization", "Bearer secret-b"), (END_USER, "alice")))
    c = owner_of((("authorization", "Bearer secret-a"), (END_USER, "bob")))
    assert len({a, b, c}) == 3
    assert "secret" not in a
    assert owner_of(()) == owner_of(None) != owner_of(((END_USER, "alice"),))


def test_uses_for_params():
    assert uses_for({}, "o") == ()
    read = new_context_id()
    (use,) = uses_for({"context_id": read}, "o")
    assert (use.read_id, use.keep_id, use.owner) == (read, "", "o")
    (use,) = uses_for({"keep_context": True}, "o")
    assert use.read_id == "" and use.keep_id.startswith("ctx_") and use.keep_id != new_context_id()


@given(st.text(max_size=40))
def test_context_params_name_the_field(value):
    if value.startswith("ctx_") and len(value) == 36 and all(c in "0123456789abcdef" for c in value[4:]):
        return
    with pytest.raises(InvalidArgument, match="params.context_id"):
        ContextParams.from_params({"context_id": value})


def test_context_use_round_trips_the_wire():
    use = ContextUse(new_context_id(), new_context_id(), "owner-1", "cond")
    msg = items_to_proto([OpenNode("r1", "prefill", contexts=(use,))])
    ((_field, item),) = request_from_proto(msg)
    assert item.contexts == (use,)


def test_a_malformed_context_use_on_the_wire_names_its_field():
    msg = items_to_proto([OpenNode("r1", "prefill")])
    msg.items[0].open.contexts.add(read_id="ctx_nothex", owner="o")
    ((_field, item),) = request_from_proto(msg)
    assert isinstance(item, Rejected) and item.status == "INVALID_ARGUMENT"
    assert "open.contexts[0].read_id" in item.message


def test_directory_is_bounded_lru():
    d = ContextDirectory(capacity=2)
    a, b, c = (new_context_id() for _ in range(3))
    d.kept(a, ["x:1"])
    d.kept(b, ["y:1"])
    assert d.holders(a) == {"x:1"}  # a is now the most recent
    d.kept(c, ["z:1"])
    assert d.holders(b) == frozenset() and d.holders(a) == {"x:1"} and len(d) == 2


def test_a_continued_context_goes_to_the_replica_that_keeps_it():
    placement = Placement.from_dict({"services": {"lm": {"replicas": ["h:1", "h:2", "h:3"]}},
                                     "placement": {"prefill": "lm"}})
    selector, node = ReplicaSelector(placement), GraphNode("prefill", ("x",), ("y",), stateful=True)
    contexts = KeptContexts()
    kept = new_context_id()
    contexts.end({"context_id": kept, "holders": {"prefill": "h:3"}})
    for i in range(4):  # the least-loaded choice would spread these; the context holds them on h:3
        rid = f"r{i}"
        uses = contexts.begin(rid, {"context_id": kept}, (), selector)
        assert uses[0].read_id == kept
        assert selector.choose(rid, node, "w").endpoint == "h:3"
    selector.set_serving("h:3", False)  # down: the request goes elsewhere (and is NOT_FOUND there)
    contexts.begin("r9", {"context_id": kept}, (), selector)
    assert selector.choose("r9", node, "w").endpoint != "h:3"
    for i in (*range(4), 9):
        selector.release(f"r{i}")
    selector.check_integrity()
    assert selector.num_pinned == 0 and not selector._affinity


def _summary(ids, size=4, seed=b"s" * 16):
    from core.block_hash import chain_hashes

    return {"seed": seed.hex(), "block_size": size, "names": [n.hex() for n in chain_hashes(ids, size, seed)]}


def test_the_replica_with_the_longest_cached_prefix_is_preferred_load_breaking_ties():
    from conductor.prefix_directory import PrefixDirectory

    prefixes = PrefixDirectory()
    prompt = list(range(100, 140))
    assert prefixes.longest(prompt) == frozenset()  # nothing published: no preference
    prefixes.publish("h:1", _summary(prompt[:8]))
    prefixes.publish("h:2", _summary(prompt[:24]))
    prefixes.publish("h:3", _summary(prompt[:24]))
    prefixes.publish("h:4", {"seed": "zz", "block_size": 4, "names": []})  # malformed: ignored
    assert prefixes.longest(prompt) == {"h:2", "h:3"}
    assert prefixes.longest([7] + prompt) == frozenset()  # a different first block matches nothing
    placement = Placement.from_dict({"services": {"lm": {"replicas": ["h:1", "h:2", "h:3"]}},
                                     "placement": {"prefill": "lm"}})
    selector, node = ReplicaSelector(placement), GraphNode("prefill", ("x",), ("y",), stateful=True)
    contexts = KeptContexts(prefixes=prefixes)
    picks = []
    for i in range(4):
        contexts.begin(f"r{i}", {}, (), selector, lambda: prompt)
        picks.append(selector.choose(f"r{i}", node, "w").endpoint)
    assert sorted(picks) == ["h:2", "h:2", "h:3", "h:3"]  # the two holders, the less loaded first
    contexts.end({"prefix_summary": ("h:1", _summary(prompt))})  # h:1 now holds all of it
    contexts.begin("r9", {}, (), selector, lambda: prompt)
    assert selector.choose("r9", node, "w").endpoint == "h:1"


def test_a_service_with_one_replica_never_reads_the_prompt_for_its_choice():
    from conductor.prefix_directory import PrefixDirectory

    prefixes = PrefixDirectory()
    prefixes.publish("h:1", _summary(list(range(8))))
    placement = Placement.from_dict({"services": {"lm": {"replicas": ["h:1"]}}, "placement": {"prefill": "lm"}})
    selector = ReplicaSelector(placement)

    def unread():
        raise AssertionError("the prompt was read for a choice there is not")

    KeptContexts(prefixes=prefixes).begin("r1", {}, (), selector, unread)
    assert not selector.has_choice() and not selector._affinity


def test_the_request_span_says_how_many_prompt_tokens_the_cache_gave():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from conductor.request_run import RequestRun

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    run = RequestRun("r1", {}, {}, "w", None)
    run.spans.append(provider.get_tracer("t").start_span("request"))
    run.note("prefill", {"cached_prompt_tokens": 48, "prompt_tokens": 53}, None)
    run.spans[0].end()
    (span,) = exporter.get_finished_spans()
    assert span.attributes["starmesh.cached_prompt_tokens"] == 48 and span.attributes["starmesh.prompt_tokens"] == 53
    assert run.report == {"cached_prompt_tokens": 48, "prompt_tokens": 53}
