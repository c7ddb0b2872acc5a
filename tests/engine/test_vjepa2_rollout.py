"""The KV-cached rollout equals the recompute rollout (the full block-causal pass over
the growing prefix at every step, each prediction layer-normed before it is fed back, or
not with normalize_reps off), solo and batched with rollouts of other lengths; the
predictor's mask is block-causal; the KV pool returns to empty after rollouts and
cancels (fp32, to 1e-5 of the output's peak, on the tiny checkpoint)."""
from __future__ import annotations

import pytest
import torch

from engine.models.vjepa2_ac.rollout_engine import RolloutConfig, RolloutEngine
from engine.models.vjepa2_ac.recompute import recompute_rollout
from core.errors import ResourceExhausted
from engine.models.vjepa2_ac.rollouts import Rollout, RolloutFailed
from tests.fixtures import tiny_vjepa2 as tv
from tests.fixtures.threads import one_thread

RTOL = 1e-5  # of the output's peak: normalized predictions are unit-scale per token


def _assert_close(got: torch.Tensor, ref: torch.Tensor, what: str = "") -> None:
    assert got.shape == ref.shape, what
    err = float((got - ref).abs().max() / ref.abs().max())
    assert err <= RTOL, f"{what} relative error {err:.2e}"


@pytest.fixture(scope="module")
def predictor():
    return tv.models()[1]


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def _case(num_context: int, horizon: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    n = num_context + horizon - 1
    return (torch.randn(num_context, tv.NUM_PATCHES, 32, generator=g), torch.randn(n, 7, generator=g),
            torch.randn(n, 7, generator=g))


def _run(engine: RolloutEngine) -> dict[str, list[torch.Tensor]]:
    out: dict[str, list[torch.Tensor]] = {}
    while engine.has_work():
        for o in engine.step():
            assert not isinstance(o, RolloutFailed), o.error
            out.setdefault(o.rollout_id, []).append(o.prediction)
    return out


def _reference(predictor, feats, actions, states, horizon, normalize: bool = True) -> torch.Tensor:
    with torch.no_grad():
        return recompute_rollout(predictor, feats[None], actions[None], states[None], horizon, normalize)[0]


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("horizon", [1, 4, 15])
def test_cached_rollout_equals_recompute_solo(predictor, horizon, normalize):
    feats, actions, states = _case(2 if horizon < 15 else 1, horizon, seed=horizon)
    engine = RolloutEngine(predictor, RolloutConfig(normalize_reps=normalize))
    engine.add(Rollout("r", feats, actions, states, horizon))
    got = torch.stack(_run(engine)["r"])                                    # [H, HW, D]
    ref = _reference(predictor, feats, actions, states, horizon, normalize)
    assert got.shape == ref.shape == (horizon, tv.NUM_PATCHES, 32)
    _assert_close(got, ref)
    if normalize:  # every prediction layer-normed over its features
        torch.testing.assert_close(got.mean(-1), torch.zeros(got.shape[:2]), atol=1e-5, rtol=0)
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 0


def test_cached_rollouts_batched_with_other_lengths(predictor):
    shapes = {"a": (2, 15), "b": (1, 4), "c": (3, 1), "d": (2, 4), "e": (4, 12)}
    cases = {rid: (*_case(t_c, h, seed=i), h) for i, (rid, (t_c, h)) in enumerate(shapes.items())}
    engine = RolloutEngine(predictor)
    for rid, (feats, actions, states, h) in cases.items():
        engine.add(Rollout(rid, feats, actions, states, h))
    got = _run(engine)
    for rid, (feats, actions, states, h) in cases.items():
        _assert_close(torch.stack(got[rid]), _reference(predictor, feats, actions, states, h), f"rollout {rid}")
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 0


@pytest.mark.parametrize("t", [1, 3, 5])
def test_mask_is_block_causal(predictor, t):
    """Perturbing timestep t's inputs (patches, action, state) changes no output of an
    earlier timestep, and does change timestep t's."""
    num_steps = 6
    g = torch.Generator().manual_seed(t)
    x = torch.randn(1, num_steps, tv.NUM_PATCHES, 32, generator=g)
    a, s = torch.randn(1, num_steps, 7, generator=g), torch.randn(1, num_steps, 7, generator=g)
    x2, a2, s2 = x.clone(), a.clone(), s.clone()
    x2[:, t] += 1.0
    a2[:, t] += 1.0
    s2[:, t] += 1.0
    with torch.no_grad():
        y = predictor(x.flatten(1, 2), a, s).view(1, num_steps, tv.NUM_PATCHES, -1)
        y2 = predictor(x2.flatten(1, 2), a2, s2).view(1, num_steps, tv.NUM_PATCHES, -1)
    torch.testing.assert_close(y2[:, :t], y[:, :t], atol=0, rtol=0)
    assert (y2[:, t] - y[:, t]).abs().max() > 1e-2


def test_action_alone_moves_only_later_predictions(predictor):
    feats, actions, states = _case(2, 4, seed=9)
    moved = actions.clone()
    moved[3] += 1.0  # timestep 3 conditions prediction 2 (timestep 4) onwards
    base, other = (_reference(predictor, feats, a, states, 4) for a in (actions, moved))
    torch.testing.assert_close(other[:2], base[:2], atol=0, rtol=0)
    assert (other[2:] - base[2:]).abs().max() > 1e-3


def test_cancel_mid_rollout_frees_every_block(predictor):
    engine = RolloutEngine(predictor)
    for rid in ("x", "y"):
        engine.add(Rollout(rid, *_case(2, 10, seed=1), 10))
    engine.step()
    engine.step()
    assert engine.pool.num_used_blocks == 2 * 3
    engine.abort("x")
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 3
    engine.abort("y")
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 0 and not engine.has_work()


def test_a_rollout_bigger_than_the_pool_is_refused(predictor):
    engine = RolloutEngine(predictor, RolloutConfig(num_blocks=4))
    with pytest.raises(ResourceExhausted, match="needs 7 KV blocks"):
        engine.add(Rollout("big", *_case(2, 6, seed=2), 6))   # 2 + 6 - 1 timesteps
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 0 and not engine.has_work()


def test_rollouts_wait_for_blocks_then_equal_recompute(predictor):
    """A pool of 8 blocks and rollouts needing 7, 4 and 5: each starts once all of its
    blocks fit beside the running ones' remaining needs, so none fails midway."""
    engine = RolloutEngine(predictor, RolloutConfig(num_blocks=8))
    cases = {rid: (*_case(t_c, h, seed=i), h) for i, (rid, t_c, h) in enumerate([("a", 2, 6), ("b", 1, 4),
                                                                                 ("c", 3, 3)])}
    for rid, (feats, actions, states, h) in cases.items():
        engine.add(Rollout(rid, feats, actions, states, h))
    first = engine.step()
    assert [o.rollout_id for o in first] == ["a"]
    assert engine.load()["rollouts_waiting"] == 2  # "b" (4) does not fit beside "a"'s 7
    got = _run(engine)
    got["a"].insert(0, first[0].prediction)
    for rid, (feats, actions, states, h) in cases.items():
        _assert_close(torch.stack(got[rid]), _reference(predictor, feats, actions, states, h), f"rollout {rid}")
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 0


def test_parked_rollout_waits(predictor):
    engine = RolloutEngine(predictor)
    engine.add(Rollout("p", *_case(1, 3, seed=3), 3))
    engine.step()
    engine.park("p")
    assert not engine.has_work() and engine.step() == []
    engine.unpark("p")
    assert len(_run(engine)["p"]) == 2
