"""Cross-entropy-method planning over the rollout engine.

Each iteration samples N candidate action sequences [H, A] (engine.models.vjepa2_ac.cem:
the upstream planner's clipping, zeroed rotation and pose composition), rolls every
candidate out from the same context, scores it by the mean L1 distance between its last
prediction and the goal's features (both normalized alike: the encoder and the rollout
apply the same loop), and refits the distribution to the best `num_elites` with
momentum. The first planned action is the action token of the last context timestep;
the states of later timesteps follow from the context's last state and the candidate's
actions. With share_prefix, the context timesteps before the last (identical for every
candidate) are computed and stored once per plan and read by all candidates of all
iterations.

The plan is a state machine the caller drives: feed it the engine's outputs
(`on_output`), and call `advance()` whenever `is_iteration_done`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.models.vjepa2_ac import cem
from engine.models.vjepa2_ac.cem import PlanConfig
from engine.models.vjepa2_ac.rollout_engine import RolloutEngine
from engine.models.vjepa2_ac.rollouts import Rollout, RolloutFailed, StepOutput

__all__ = ["CemPlan", "PlanConfig", "PlanResult", "run_plan"]


@dataclass
class PlanResult:
    actions: torch.Tensor            # [H, A], the best candidate seen
    score: float
    iteration_scores: list[float] = field(default_factory=list)  # the best score of each iteration


class CemPlan:
    def __init__(self, engine: RolloutEngine, plan_id: str, feats: torch.Tensor, actions: torch.Tensor,
                 states: torch.Tensor, goal: torch.Tensor, config: PlanConfig) -> None:
        """feats [T_c, HW, D] context features, actions [T_c - 1, A] of the context
        timesteps before the last, states [T_c, A], goal [HW, D]."""
        self.engine, self.plan_id, self.config = engine, plan_id, config
        self.feats, self.actions, self.states, self.goal = feats, actions, states, goal
        self.generator = torch.Generator().manual_seed(config.seed)
        self.mean, self.std = cem.initial(actions.shape[1], config)    # [H, A] each
        self.prefix = f"{plan_id}/prefix" if config.share_prefix and feats.shape[0] > 1 else None
        self.iteration = 0
        self.candidates: torch.Tensor | None = None         # [N, H, A] of this iteration
        self.finals: dict[int, torch.Tensor] = {}           # candidate -> its last prediction [HW, D]
        self.result: PlanResult | None = None
        self.error: Exception | None = None
        self._best = (float("inf"), None)
        self._scores: list[float] = []

    def start(self) -> None:
        if self.prefix is not None:
            p = self.feats.shape[0] - 1
            self.engine.add_prefix(self.prefix, self.plan_id, self.feats[:p], self.actions[:p], self.states[:p])
        self._spawn()

    def _spawn(self) -> None:
        cfg = self.config
        self.candidates = cem.sample(self.mean, self.std, cfg, self.generator)     # [N, H, A]
        futures = cem.future_states(self.states[-1], self.candidates)              # [N, H - 1, A]
        self.finals = {}
        for i, (cand, future) in enumerate(zip(self.candidates, futures)):
            self.engine.add(Rollout(f"{self.plan_id}/{self.iteration}/{i}", self.feats,
                                    torch.cat([self.actions, cand]), torch.cat([self.states, future]),
                                    cfg.horizon, group=self.plan_id, prefix=self.prefix))

    def rollout_inputs(self, cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A candidate [H, A] -> the rollout's actions and states [T_c + H - 1, A]."""
        future = cem.future_states(self.states[-1], cand[None])[0]                # [H - 1, A]
        return torch.cat([self.actions, cand]), torch.cat([self.states, future])

    def on_output(self, out: StepOutput | RolloutFailed) -> None:
        if isinstance(out, RolloutFailed):
            self.error = out.error
        elif out.is_last:
            self.finals[int(out.rollout_id.rsplit("/", 1)[1])] = out.prediction

    @property
    def is_iteration_done(self) -> bool:
        return self.error is None and self.result is None and len(self.finals) == self.config.num_candidates

    def advance(self) -> bool:
        """Scores the finished iteration, refits, and starts the next; True once done."""
        cfg = self.config
        finals = torch.stack([self.finals[i] for i in range(cfg.num_candidates)])   # [N, HW, D]
        scores = (finals.float() - self.goal.to(finals.device).float()).abs().mean(dim=(1, 2)).cpu()  # [N]
        order = torch.argsort(scores)
        self._scores.append(float(scores[order[0]]))
        if float(scores[order[0]]) < self._best[0]:
            self._best = (float(scores[order[0]]), self.candidates[order[0]].clone())
        self.mean, self.std = cem.refit(self.mean, self.std, self.candidates[order[: cfg.num_elites]], cfg)
        self.iteration += 1
        if self.iteration < cfg.num_iterations:
            self._spawn()
            return False
        self.finish()
        return True

    def finish(self) -> None:
        if self.prefix is not None and self.prefix in self.engine.prefixes.prefixes:
            self.engine.release_prefix(self.prefix)
        self.result = PlanResult(self._best[1], self._best[0], self._scores)


def run_plan(plan: CemPlan) -> PlanResult:
    """Drives one plan to its end on its engine alone (tests, benchmarks)."""
    plan.start()
    while plan.result is None:
        for out in plan.engine.step():
            plan.on_output(out)
        if plan.error is not None:
            plan.engine.abort(plan.plan_id)
            raise plan.error
        if plan.is_iteration_done:
            plan.advance()
    return plan.result
