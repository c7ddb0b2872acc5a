"""The BAGEL backbone's fused denoising loop (`denoise`, services/bagel/denoises.py): the
loops of concurrent requests take their updates together (one forward per component step
over every branch of every loop in flight), each request's latent equals the in-process
runner's and, bit for bit, the fan-out loop's (velocity_* then combine) on the same
request; a step event per update; a cancelled loop frees every block; a run whose query
fails fails alone."""
from __future__ import annotations

import pytest
import torch

from engine.models.bagel.params import BagelParams
from pipelines.bagel.runner import BagelRunner
from runtime.items import NodeDone, NodeError, NodeOutput, OpenNode
from services.bagel.component import BagelComponent
from tests.fixtures import tiny_bagel
from tests.pipelines.bagel_cases import load_parts
from tests.services.test_bagel_batching import _prompt, _until

GUIDED = dict(cfg_text_scale=3.0, cfg_interval_start=0.0, cfg_renorm_type="channel")
# (prompt, steps, width, height, seed): loops of different lengths and sizes
CASES = [("a red fox", 4, 32, 32, 1), ("a quiet lake at dawn", 6, 48, 32, 2), ("snow", 3, 32, 48, 3)]


@pytest.fixture(scope="module")
def setup():
    directory = tiny_bagel.checkpoint()
    return BagelComponent.from_checkpoint(directory), BagelRunner(load_parts(directory))


def _params(steps: int, width: int, height: int, seed: int) -> dict:
    return dict(GUIDED, steps=steps, width=width, height=height, seed=seed)


def _prefilled(component, rid: str, prompt: str, params: dict) -> dict:
    """Both prefills and init_latent of a text-to-image request -> the loop's inputs."""
    for node in ("prefill_t2i", "prefill_t2i_cfg"):
        component.open(OpenNode(rid, node, params=params), _prompt(prompt))
    events = _until(component, lambda ev: sum(isinstance(e, NodeDone) for e in ev) == 2)
    size = next(e.tensors["size"] for e in events if isinstance(e, NodeOutput))
    component.open(OpenNode(rid, "init_latent", params=params), {"size": size})
    latent = _until(component, lambda ev: any(isinstance(e, NodeOutput) for e in ev))[0].tensors["latent"]
    return {"latent": latent, "size": size, "size_cfg": size}


def _open_loop(component, rid: str, params: dict, inputs: dict) -> None:
    component.open(OpenNode(rid, "denoise", params=params, max_iters=100), inputs)


def _loop_outputs(events, rid: str) -> list[NodeOutput]:
    return [e for e in events if isinstance(e, NodeOutput) and e.request_id == rid and e.node == "denoise"]


def _done(rids):
    return lambda ev: {e.request_id for e in ev if isinstance(e, (NodeDone, NodeError))} >= set(rids)


def _runner_latent(runner, prompt: str, params: dict) -> torch.Tensor:
    return runner.run([prompt], BagelParams(**params)).latents


def test_concurrent_loops_share_their_forwards_and_equal_each_alone(setup):
    component, runner = setup
    kv = component.table.kv
    inputs = {f"d{i}": _prefilled(component, f"d{i}", p, _params(*c)) for i, (p, *c) in enumerate(CASES)}
    before, events = kv.num_forwards, []
    for i, (_, *case) in enumerate(CASES[:2]):
        _open_loop(component, f"d{i}", _params(*case), inputs[f"d{i}"])
    events += component.step()  # d0 and d1 take their first update together
    _open_loop(component, "d2", _params(*CASES[2][1:]), inputs["d2"])  # joins at the next step
    events += _until(component, _done(inputs))
    updates = sum(steps - 1 for _, steps, *_ in CASES)
    # one forward per component step: as many as the longest loop (d1, 5 updates), not one per update
    assert kv.num_forwards - before == CASES[1][1] - 1 < updates
    for i, (prompt, *case) in enumerate(CASES):
        outs = _loop_outputs(events, f"d{i}")
        steps = case[0]
        assert [o.tensors["step"].tolist() for o in outs] == [[k + 1, steps - 1] for k in range(steps - 1)]
        assert [o.iteration for o in outs] == [(k,) for k in range(steps - 1)]
        assert "latent" not in outs[0].tensors and outs[-1].tensors["done"].tolist() == [1]
        torch.testing.assert_close(outs[-1].tensors["latent"][0], _runner_latent(runner, prompt, _params(*case)),
                                   atol=1e-5, rtol=1e-5)
    assert not component.table.requests and kv.pool.num_used_blocks == 0


def test_the_fused_loop_equals_the_fan_out_loop_bit_for_bit(setup):
    """The same request through denoise and through velocity_* -> combine: the same latents."""
    component, _ = setup
    params = _params(5, 32, 48, 7)
    fused = _prefilled(component, "fused", "a red fox", params)
    _open_loop(component, "fused", params, fused)
    want = _loop_outputs(_until(component, _done(["fused"])), "fused")[-1].tensors["latent"]
    latent, size = _prefilled(component, "fan", "a red fox", params)["latent"], fused["size"]
    for k in range(params["steps"] - 1):
        for branch in ("gen", "cfg_text", "cfg_img"):  # queued together: one forward, as the fused loop's
            component.open(OpenNode("fan", f"velocity_{branch}", params=params, iteration=(k,)),
                           {"latent": latent, "size": size})
        ran = _until(component, lambda ev: sum(isinstance(e, NodeDone) for e in ev) == 3)
        v = {e.node[len("velocity_"):]: e.tensors["v"] for e in ran if isinstance(e, NodeOutput)}
        component.open(OpenNode("fan", "combine", params=params, iteration=(k,)), {"latent": latent, "size": size, **v})
        latent = _until(component, lambda ev: bool(ev))[0].tensors["latent"]
    assert torch.equal(latent, want)
    assert not component.table.requests and component.table.kv.pool.num_used_blocks == 0


def test_a_loop_cancelled_mid_denoise_frees_every_block_and_the_others_go_on(setup):
    component, runner = setup
    kv = component.table.kv
    (prompt, *case), long = CASES[0], _params(40, 32, 32, 5)
    inputs = {"stay": _prefilled(component, "stay", prompt, _params(*case)),
              "gone": _prefilled(component, "gone", "a long one", long)}
    _open_loop(component, "stay", _params(*case), inputs["stay"])
    _open_loop(component, "gone", long, inputs["gone"])
    events = component.step() + component.step()
    assert len(_loop_outputs(events, "gone")) == 2 and kv.pool.num_used_blocks > 0
    component.cancel("gone")
    kv.check(component.table.kept.holders())  # the pool's refcounts match what still holds blocks
    events += _until(component, _done(["stay"]))
    assert len(_loop_outputs(events, "gone")) == 2 and not component.denoises.runs
    torch.testing.assert_close(_loop_outputs(events, "stay")[-1].tensors["latent"][0],
                               _runner_latent(runner, prompt, _params(*case)), atol=1e-5, rtol=1e-5)
    assert not component.table.requests and kv.pool.num_used_blocks == 0
    kv.check(component.table.kept.holders())


def test_a_loop_whose_query_fails_fails_alone(setup):
    """A request whose gen context is gone (freed behind the table's back): its loop fails
    NOT_FOUND naming the context, its blocks go, the loop beside it ends as it would alone."""
    component, runner = setup
    kv = component.table.kv
    (prompt, *case) = CASES[1]
    inputs = {"good": _prefilled(component, "good", prompt, _params(*case)),
              "bad": _prefilled(component, "bad", "broken", _params(*case))}
    for rid in inputs:
        _open_loop(component, rid, _params(*case), inputs[rid])
    events = component.step()
    kv.free(("bad", "gen"))
    events += _until(component, _done(inputs))
    errors = [e for e in events if isinstance(e, NodeError)]
    assert [(e.request_id, e.status) for e in errors] == [("bad", "NOT_FOUND")] and "'gen'" in errors[0].message
    assert len(_loop_outputs(events, "good")) == case[0] - 1
    torch.testing.assert_close(_loop_outputs(events, "good")[-1].tensors["latent"][0],
                               _runner_latent(runner, prompt, _params(*case)), atol=1e-5, rtol=1e-5)
    assert not component.table.requests and kv.pool.num_used_blocks == 0


def test_a_loop_without_contexts_or_past_its_bound_is_refused_at_open(setup):
    component, _ = setup
    latent = torch.zeros(1, 16, 4, 4)
    size = torch.tensor([32, 32])
    with pytest.raises(Exception, match="no contexts on this replica"):
        _open_loop(component, "nobody", _params(4, 32, 32, 0), {"latent": latent, "size": size, "size_cfg": size})
    with pytest.raises(Exception, match=r"params.steps \(9\)"):
        component.open(OpenNode("nobody", "denoise", params=_params(9, 32, 32, 0), max_iters=4),
                       {"latent": latent, "size": size, "size_cfg": size})
    assert not component.denoises.runs
