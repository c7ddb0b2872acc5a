"""CEM planning on the rollout engine: candidates reading a shared prefix equal the same
candidates rolled out alone (and the recompute rollout); the pool returns to empty after
plans and cancelled plans; the shared prefix is stored once."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.rollout_engine import RolloutEngine
from engine.models.vjepa2_ac.planner import CemPlan, PlanConfig, run_plan
from engine.models.vjepa2_ac.recompute import recompute_rollout
from tests.fixtures import tiny_vjepa2 as tv
from tests.fixtures.threads import one_thread


@pytest.fixture(scope="module")
def predictor():
    return tv.models()[1]


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def _plan(predictor, share: bool, engine: RolloutEngine | None = None, **cfg) -> CemPlan:
    g = torch.Generator().manual_seed(5)
    t_c = 3
    feats = torch.randn(t_c, tv.NUM_PATCHES, 32, generator=g)
    actions, states = torch.randn(t_c - 1, 7, generator=g), torch.randn(t_c, 7, generator=g)
    goal = torch.randn(tv.NUM_PATCHES, 32, generator=g)
    config = PlanConfig(**{"num_candidates": 8, "num_iterations": 2, "num_elites": 2, "horizon": 3,
                           "share_prefix": share, **cfg})
    return CemPlan(engine or RolloutEngine(predictor), "plan", feats, actions, states, goal, config)


def test_shared_prefix_candidates_equal_solo_candidates(predictor):
    shared, alone = _plan(predictor, True), _plan(predictor, False)
    a, b = run_plan(shared), run_plan(alone)
    torch.testing.assert_close(a.actions, b.actions, atol=0, rtol=0)  # same candidates chosen
    assert a.score == pytest.approx(b.score, abs=1e-5)
    assert a.iteration_scores == pytest.approx(b.iteration_scores, abs=1e-5)
    assert len(a.iteration_scores) == 2 and a.score == min(a.iteration_scores)
    for plan in (shared, alone):
        plan.engine.check_integrity()
        assert plan.engine.pool.num_used_blocks == 0


def test_best_candidate_score_matches_recompute(predictor):
    plan = _plan(predictor, True)
    result = run_plan(plan)
    actions, states = plan.rollout_inputs(result.actions)
    with torch.no_grad():
        final = recompute_rollout(predictor, plan.feats[None], actions[None], states[None], 3)[0, -1]
    assert float((final - plan.goal).abs().mean()) == pytest.approx(result.score, abs=1e-5)


def test_prefix_is_stored_once(predictor):
    plan = _plan(predictor, True)
    plan.start()
    plan.engine.step()  # every candidate fed its last context timestep
    # prefix: 2 timesteps once; each of 8 candidates: its own last context timestep
    assert plan.engine.pool.num_used_blocks == 2 + 8
    alone = _plan(predictor, False)
    alone.start()
    alone.engine.step()
    assert alone.engine.pool.num_used_blocks == 3 * 8
    for p in (plan, alone):
        p.engine.abort("plan")
        p.engine.check_integrity()
        assert p.engine.pool.num_used_blocks == 0


def test_plan_in_a_small_pool_runs_its_candidates_in_waves(predictor):
    from engine.models.vjepa2_ac.rollout_engine import RolloutConfig

    small = _plan(predictor, True, RolloutEngine(predictor, RolloutConfig(num_blocks=2 + 3 * 3)))  # 3 at a time
    a, b = run_plan(small), run_plan(_plan(predictor, True))
    torch.testing.assert_close(a.actions, b.actions, atol=0, rtol=0)
    assert a.score == pytest.approx(b.score, abs=1e-6)
    small.engine.check_integrity()
    assert small.engine.pool.num_used_blocks == 0


def test_cancelled_plan_frees_its_prefix_and_candidates(predictor):
    engine = RolloutEngine(predictor)
    plan = _plan(predictor, True, engine)
    plan.start()
    for _ in range(2):
        for out in engine.step():
            plan.on_output(out)
    assert engine.pool.num_used_blocks > 0
    engine.abort("plan")
    engine.check_integrity()
    assert engine.pool.num_used_blocks == 0 and not engine.prefixes.prefixes and not engine.has_work()


@pytest.mark.parametrize("field, value", [("num_candidates", 0), ("horizon", -1), ("num_elites", 99),
                                          ("init_std", 0.0)])
def test_bad_plan_config_names_the_field(field, value):
    with pytest.raises(InvalidArgument, match=field):
        PlanConfig(**{field: value})
