"""The executor over in-process toy components: pipelines, loops (last/accumulate,
inside a component, driven by the conductor), joins, streaming edges, failures."""
import asyncio
import pytest
import torch

from conductor.executor import Executor, RequestFailed
from conductor.executor_hooks import ExecutorHooks
from conductor.executor_setup import inprocess_executor
from conductor.targets import InProcessTarget
from core.errors import GraphError, InvalidArgument
from graph.chunking import LeftContext
from graph.composites import DynamicLoop, Loop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.edge import StreamingGraphEdge
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph
from bench.toys import Toy

pytestmark = pytest.mark.timeout(60)


def run(graph, components, requests, inner_loops=frozenset(), speculate=True, stats=None):
    """Runs {request_id: inputs} concurrently; returns {request_id: {output: [values]}}."""

    async def main():
        async with inprocess_executor(graph, components, inner_loops, speculate) as ex:
            async def one(rid, inputs):
                out = {}
                async for name, value in ex.generate(rid, {k: (v,) for k, v in inputs.items()}):
                    out.setdefault(name, []).append(value)
                return out

            results = await asyncio.gather(*(one(r, i) for r, i in requests.items()), return_exceptions=True)
            if stats is not None:
                stats["num_wasted"] = ex.num_wasted
            return dict(zip(requests, results))

    return asyncio.run(main())


def test_pipeline_and_loop_channels():
    # A loop's channel belongs to the output port: b.h leaves as "last", b.s as "accumulate".
    nodes = [N("a", ("x",), ("y",)), N("b", ("y", "h"), ("h", "s")), N("c", ("last", "all"), ("z",))]
    walk = Walk("w", Sequential("a", Loop("l", "b", max_iters=3, carry=[E("b.h", "b.h")], accumulate=["b.s"]), "c"), [
        E("input.x", "a.x"), E("a.y", "b.y"), E("a.y", "b.h"), E("b.s", "c.all"), E("b.h", "c.last"),
        E("c.z", "output.z")])
    graph = WalkGraph("t", nodes, [walk])
    toy = Toy("toy", {
        "a": lambda i, p: {"y": i["x"] * 2},
        "b": lambda i, p: {"h": i["h"] + i["y"], "s": i["h"] + i["y"]},
        "c": lambda i, p: {"z": torch.cat([i["last"], i["all"]])},
    })
    out = run(graph, [toy], {"r": {"x": torch.tensor([1.0])}})["r"]
    # h: 2 -> 4 -> 6 -> 8; last = 8, accumulate = [4, 6, 8]
    assert out["z"][0].tolist() == [8.0, 4.0, 6.0, 8.0]


@pytest.mark.parametrize("speculate", [True, False])
def test_dynamic_loops_stop_per_request(speculate):
    nodes = [N("inc", ("x",), ("x",)), N("check", ("x", "limit"), ("stop",)), N("emit", ("x",), ("y",))]
    loop = DynamicLoop("l", Sequential("inc", "check"), max_iters=20, carry=[E("inc.x", "inc.x")],
                       stop=StopRule("check.stop", predicate=lambda v: bool(v.any())))
    walk = Walk("w", Sequential(loop, "emit"), [
        E("input.x", "inc.x"), E("inc.x", "check.x"), E("input.limit", "check.limit"), E("inc.x", "emit.x"),
        E("emit.y", "output.y"), E("inc.x", "output.trace")])
    toy = Toy("toy", {
        "inc": lambda i, p: {"x": i["x"] + 1},
        "check": lambda i, p: {"stop": i["x"] >= i["limit"]},
        "emit": lambda i, p: {"y": i["x"]},
    }, max_delay_s=0.002)
    requests = {f"r{n}": {"x": torch.tensor([0]), "limit": torch.tensor([n + 1])} for n in range(8)}
    stats = {}
    results = run(WalkGraph("t", nodes, [walk]), [toy], requests, speculate=speculate, stats=stats)
    # inc(k + 1) is dispatched beside check(k) when speculating: exactly one wasted run
    # per stop (never more: only one iteration runs ahead); none without speculation
    assert stats["num_wasted"] == (8 if speculate else 0)
    assert toy.num_opened == sum(2 * (n + 1) + 1 for n in range(8)) + stats["num_wasted"]  # inc, check; emit
    for n in range(8):
        out = results[f"r{n}"]
        assert out["y"][0].tolist() == [n + 1]  # each stops at its own limit
        assert [v.item() for v in out["trace"]] == list(range(1, n + 2))  # no extra iteration shown


def test_loop_inside_a_component_with_stop_tokens():
    nodes = [N("prefill", ("ids",), ("tok",)), N("decode", ("tok",), ("tok",), stateful=True)]
    loop = DynamicLoop("gen", "decode", max_iters=10, stop=StopRule("decode.tok", stop_token_ids=(7,)))
    walk = Walk("w", Sequential("prefill", loop), [
        E("input.ids", "prefill.ids"), E("prefill.tok", "decode.tok"), E("decode.tok", "output.tok")])
    toy = Toy("lm", {"prefill": lambda i, p: {"tok": i["ids"][-1:]},
                     "decode": lambda i, p: {"tok": i["tok"] + 1}}, loops={"decode": {"tok": "tok"}})
    results = run(WalkGraph("t", nodes, [walk]), [toy],
                  {"a": {"ids": torch.tensor([1, 2])}, "b": {"ids": torch.tensor([5])}}, inner_loops={"gen"})
    assert [t.item() for t in results["a"]["tok"]] == [3, 4, 5, 6, 7]
    assert [t.item() for t in results["b"]["tok"]] == [6, 7]
    assert toy.num_opened == 4  # one open per loop, not per token


def test_parallel_join_never_mixes_requests_or_iterations():
    nodes = [N("cond", ("z",), ("v",)), N("uncond", ("z",), ("v",)), N("combine", ("z", "c", "u"), ("z",))]
    loop = Loop("denoise", Sequential(Parallel("cond", "uncond"), "combine"), max_iters=4,
                carry=[E("combine.z", "cond.z"), E("combine.z", "uncond.z"), E("combine.z", "combine.z")])
    walk = Walk("w", loop, [
        E("input.z", "cond.z"), E("input.z", "uncond.z"), E("input.z", "combine.z"),
        E("cond.v", "combine.c"), E("uncond.v", "combine.u"), E("combine.z", "output.z")])
    fns = {"cond": lambda i, p: {"v": i["z"] * 3}, "uncond": lambda i, p: {"v": i["z"] + 1},
           "combine": lambda i, p: {"z": i["z"] + 0.5 * (i["c"] - i["u"])}}
    cond, uncond = Toy("c", {"cond": fns["cond"]}, max_delay_s=0.003, seed=1), Toy("u", {"uncond": fns["uncond"]}, max_delay_s=0.003, seed=2)
    combine = Toy("m", {"combine": fns["combine"]})
    requests = {f"r{n}": {"z": torch.tensor([float(n)])} for n in range(16)}
    results = run(WalkGraph("t", nodes, [walk]), [cond, uncond, combine], requests)
    for n in range(16):
        z, expected = torch.tensor([float(n)]), []
        for _ in range(4):
            z = fns["combine"]({"z": z, "c": fns["cond"]({"z": z}, {})["v"], "u": fns["uncond"]({"z": z}, {})["v"]}, {})["z"]
            expected.append(z.item())
        assert [v.item() for v in results[f"r{n}"]["z"]] == expected


def test_streaming_edge_with_left_context():
    nodes = [N("lm", ("n",), ("frame",)), N("codec", ("frames",), ("audio",))]
    loop = Loop("gen", "lm", max_iters=10, carry=[E("lm.frame", "lm.n")])
    walk = Walk("w", Sequential(loop, "codec"), [
        E("input.n", "lm.n"), StreamingGraphEdge("lm.frame", "codec.frames", chunk_policy=LeftContext(3, 2)),
        E("codec.audio", "output.audio")])
    lm = Toy("lm", {"lm": lambda i, p: {"frame": i["n"] + 1}})
    seen = []

    def decode(i, p):
        seen.append((p["_chunk"]["num_context"], i["frames"].tolist()))
        return {"audio": i["frames"][p["_chunk"]["num_context"]:] * 10}

    codec = Toy("codec", {"codec": decode})
    out = run(WalkGraph("t", nodes, [walk]), [lm, codec], {"r": {"n": torch.tensor([0])}})["r"]
    assert torch.cat(out["audio"]).tolist() == [10 * k for k in range(1, 11)]  # every frame once, in order
    assert seen == [(0, [1, 2, 3]), (2, [2, 3, 4, 5, 6]), (2, [5, 6, 7, 8, 9]), (2, [8, 9, 10])]


def test_a_failing_node_fails_only_its_request():
    nodes = [N("a", ("x",), ("y",))]
    graph = WalkGraph("t", nodes, [Walk("w", "a", [E("input.x", "a.x"), E("a.y", "output.y")])])
    toy = Toy("toy", {"a": lambda i, p: {"y": i["x"]}}, fail_on="bad")
    results = run(graph, [toy], {"bad": {"x": torch.tensor([1])}, "good": {"x": torch.tensor([2])}})
    assert isinstance(results["bad"], RequestFailed) and results["bad"].status == "INTERNAL"
    assert "on purpose" in str(results["bad"])
    assert results["good"]["y"][0].tolist() == [2]


def test_sibling_loops_see_the_exit_value():
    nodes = [N("a", ("x",), ("x",)), N("b", ("x", "acc"), ("acc",))]
    walk = Walk("w", Sequential(Loop("A", "a", max_iters=3, carry=[E("a.x", "a.x")]),
                                Loop("B", "b", max_iters=2, carry=[E("b.acc", "b.acc")])), [
        E("input.x", "a.x"), E("a.x", "b.x"), E("input.acc", "b.acc"), E("b.acc", "output.acc")])
    toy = Toy("toy", {"a": lambda i, p: {"x": i["x"] * 2}, "b": lambda i, p: {"acc": i["acc"] + i["x"]}})
    out = run(WalkGraph("t", nodes, [walk]), [toy], {"r": {"x": torch.tensor([1]), "acc": torch.tensor([0])}})["r"]
    assert [v.item() for v in out["acc"]] == [8, 16]  # A's last value (8) serves every iteration of B


@pytest.mark.parametrize("continue_after", [True, False])
def test_stream_into_a_loop_inside_a_component(continue_after):
    """thinker-like loop ~> talker-like loop: items are pushed into the talker's one
    open run; with continue_after_producer_done it keeps stepping after the stream ends."""
    nodes = [N("think", ("tok",), ("tok",)), N("talk", ("h", "c"), ("code", "c"))]
    think = DynamicLoop("T", "think", max_iters=5, stop=StopRule("think.tok", stop_token_ids=(-1,)))
    talk = DynamicLoop("S", "talk", max_iters=8, stop=StopRule("talk.code", stop_token_ids=(-1,)))
    walk = Walk("w", Sequential(think, talk), [
        E("input.tok", "think.tok"), E("input.c", "talk.c"), E("talk.code", "output.code"),
        StreamingGraphEdge("think.tok", "talk.h", continue_after_producer_done=continue_after)])
    thinker = Toy("thinker", {"think": lambda i, p: {"tok": i["tok"] + 1}}, loops={"think": {"tok": "tok"}},
                  step_delay_s=0.003)
    talker = Toy("talker", {"talk": lambda i, p: {"code": i["h"] * 10 + i["c"], "c": i["c"] + 1}},
                 loops={"talk": {"c": "c"}})
    out = run(WalkGraph("t", nodes, [walk]), [thinker, talker],
              {"r": {"tok": torch.tensor([0]), "c": torch.tensor([0])}}, inner_loops={"T", "S"})["r"]
    codes = [c.item() for c in out["code"]]
    assert codes == ([10, 21, 32, 43, 54, 55, 56, 57] if continue_after else [10, 21, 32, 43, 54])
    assert talker.num_opened == 1  # one open run, fed by pushes


def test_two_streaming_edges_in_a_row_finish():
    nodes = [N("src", ("n",), ("x",)), N("mid", ("x",), ("y",)), N("sink", ("y",), ("z",))]
    walk = Walk("w", Sequential(Loop("gen", "src", max_iters=7, carry=[E("src.x", "src.n")]), "mid", "sink"), [
        E("input.n", "src.n"), StreamingGraphEdge("src.x", "mid.x"), StreamingGraphEdge("mid.y", "sink.y"),
        E("sink.z", "output.z")])
    toy = Toy("toy", {"src": lambda i, p: {"x": i["n"] + 1}, "mid": lambda i, p: {"y": i["x"] * 2},
                      "sink": lambda i, p: {"z": i["y"] + 1}})
    out = run(WalkGraph("t", nodes, [walk]), [toy], {"r": {"n": torch.tensor([0])}})["r"]
    assert [z.item() for z in out["z"]] == [2 * k + 1 for k in range(1, 8)]


def test_a_stop_predicate_registered_by_the_component():
    nodes = [N("decode", ("tok",), ("tok",))]
    loop = DynamicLoop("gen", "decode", max_iters=50, stop=StopRule("decode.tok", component_predicate="past_10"))
    walk = Walk("w", loop, [E("input.tok", "decode.tok"), E("decode.tok", "output.tok")])
    graph = WalkGraph("t", nodes, [walk])
    lm = Toy("lm", {"decode": lambda i, p: {"tok": i["tok"] + 3}}, loops={"decode": {"tok": "tok"}},
             predicates={"past_10": lambda out: bool(out["tok"].item() > 10)})
    out = run(graph, [lm], {"r": {"tok": torch.tensor([0])}}, inner_loops={"gen"})["r"]
    assert [t.item() for t in out["tok"]] == [3, 6, 9, 12]
    unknown = DynamicLoop("gen", "decode", max_iters=5, stop=StopRule("decode.tok", component_predicate="nope"))
    graph = WalkGraph("t", nodes, [Walk("w", unknown, walk.edges)])
    failed = run(graph, [lm], {"r": {"tok": torch.tensor([0])}}, inner_loops={"gen"})["r"]
    assert isinstance(failed, RequestFailed) and failed.status == "INVALID_ARGUMENT" and "nope" in str(failed)
    with pytest.raises(Exception, match="needs the loop to run inside its component"):
        run(graph, [lm], {"r": {"tok": torch.tensor([0])}})


def test_a_missing_walk_input_is_invalid_argument():
    graph = WalkGraph("t", [N("a", ("x",), ("y",))], [Walk("w", "a", [E("input.x", "a.x"), E("a.y", "output.y")])])
    result = run(graph, [Toy("toy", {"a": lambda i, p: {"y": i["x"]}})], {"r": {}})["r"]
    assert isinstance(result, RequestFailed) and result.status == "INVALID_ARGUMENT" and "'x'" in str(result)


def two_steps():
    nodes = [N("a", ("x",), ("y",)), N("b", ("y",), ("z",))]
    walk = Walk("w", Sequential("a", "b"), [E("input.x", "a.x"), E("a.y", "b.y"), E("b.z", "output.z")])
    return WalkGraph("t", nodes, [walk]), Toy("toy", {"a": lambda i, p: {"y": i["x"] + 1},
                                                        "b": lambda i, p: {"z": i["y"] * 2}})


def test_an_executor_gets_every_hook_when_it_is_built():
    graph, toy = two_steps()
    edges, asked = [], []

    async def main():
        targets = []

        def connect(sink):
            targets.append(InProcessTarget(toy, asyncio.get_running_loop(), sink))
            return ExecutorHooks(route=lambda node, walk, rid: targets[0],
                                 consumer_hosts=lambda node, walk: asked.append(node) or (),
                                 on_edge=lambda edge, seconds: edges.append(edge))

        executor = Executor(graph, connect)
        try:
            return [value async for _, value in executor.generate("r", {"x": (torch.tensor([1.0]),)})]
        finally:
            await targets[0].close()

    assert [v.tolist() for v in asyncio.run(main())] == [[4.0]]
    assert asked == ["a", "b"]
    assert sorted(edges) == ["a.y -> b.y", "input.x -> a.x"]  # the walk's hops, once it ended


def test_hooks_and_settings_are_checked_before_any_target_is_built():
    graph, _ = two_steps()
    with pytest.raises(InvalidArgument, match="executor hooks: route must be callable"):
        ExecutorHooks(route=None)
    with pytest.raises(InvalidArgument, match="executor hooks: lockstep must be a LockstepPadder"):
        ExecutorHooks(route=lambda node, walk, rid: None, lockstep=object())
    built = []
    with pytest.raises(InvalidArgument, match="executor max_backlog must be an integer >= 1, got 0"):
        Executor(graph, built.append, max_backlog=0)
    loop = DynamicLoop("gen", "a", max_iters=3, stop=StopRule("a.y", component_predicate="eos"))
    looped = WalkGraph("t", [N("a", ("x",), ("y",))], [Walk("w", loop, [E("input.x", "a.x"), E("a.y", "output.y")])])
    with pytest.raises(GraphError, match="needs the loop to run inside its component"):
        Executor(looped, built.append)
    assert built == []  # connect never ran: no target threads to stop
