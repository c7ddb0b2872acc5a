"""Cross-entropy-method planning over the rollout engine.

Each iteration samples N candidate action sequences [H, A] from a diagonal Gaussian,
rolls every candidate out from the same context, scores it by the mean L1 distance
between its last prediction and the goal's features, and refits the Gaussian to the
best `num_elites`. The first planned action is the action token of the last context
timestep; the end-effector state of a later timestep is the previous state plus the
previous action (the actions are pose deltas). With share_prefix, the context
timesteps before the last (identical for every candidate) are computed and stored
once per plan and read by all candidates of all iterations.

The plan is a state machine the caller drives: feed it the engine's outputs
(`on_output`), and call `advance()` whenever `is_iteration_done`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.rollout_engine import RolloutEngine
from engine.models.vjepa2_ac.rollouts import Rollout, RolloutFailed, StepOutput


@dataclass(frozen=True)
class PlanConfig:
    num_candidates: int = 64
    num_iterations: int = 3
    num_elites: int = 8
    horizon: int = 4
    init_std: float = 1.0
    seed: int = 0
    share_prefix: bool = True

    def __post_init__(self) -> None:
        for name in ("num_candidates", "num_iterations", "num_elites", "horizon"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"params.{name} must be a positive integer, got {value!r}")
        if self.num_elites > self.num_candidates:
            raise InvalidArgument(f"params.num_elites {self.num_elites} exceeds num_candidates "
                                  f"{self.num_candidates}")
        if not self.init_std > 0:
            raise InvalidArgument(f"params.init_std must be > 0, got {self.init_std!r}")


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
        a = actions.shape[1]
        self.mean = torch.zeros(config.horizon, a)
        self.std = torch.full((config.horizon, a), float(config.init_std))
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
        noise = torch.randn(cfg.num_candidates, *self.mean.shape, generator=self.generator)
        self.candidates = self.mean + self.std * noise
        self.finals = {}
        for i, cand in enumerate(self.candidates):
            actions, states = self.rollout_inputs(cand)
            self.engine.add(Rollout(f"{self.plan_id}/{self.iteration}/{i}", self.feats, actions, states,
                                    cfg.horizon, group=self.plan_id, prefix=self.prefix))

    def rollout_inputs(self, cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A candidate [H, A] -> the rollout's actions and states [T_c + H - 1, A]."""
        future = self.states[-1] + torch.cumsum(cand[:-1], dim=0)                  # [H - 1, A]
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
        elites = self.candidates[order[: cfg.num_elites]]
        self.mean, self.std = elites.mean(0), elites.std(0, unbiased=False)
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
