"""The world model's walks (every node on the world service).

    rollout  frames -> encode -> prefill --prediction--> rollout loop (inside the service,
             one predicted timestep per iteration); every prediction streams to the client
    plan     frames -> encode  \\
                                 -> plan (the CEM loop: candidates x iterations, inside the
             goal   -> encode_goal /  service) -> actions, score, iteration_scores

A request with a `goal` input plans; otherwise it rolls out. Inputs: frames [F, C, H, W]
float32, giving T_c context timesteps (T_c = F with the default per-frame encoding,
F / tubelet with clip encoding), actions and states [N, A] float32 (rollout: N >= T_c +
horizon - 1; plan: the context's actions [T_c - 1, A] and states [T_c, A]), goal
[F_g, C, H, W] (its last timestep is the goal).
"""
from __future__ import annotations

from graph.composites import DynamicLoop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph

ROLLOUT_LOOP = "rollout_loop"   # runs inside the world service
MAX_ROLLOUT_STEPS = 1024        # the loop's bound; the checkpoint's positions bound it first


def _nodes() -> list[N]:
    return [
        N("encode", ("frames",), ("features",)),
        N("encode_goal", ("goal",), ("goal_features",)),
        N("prefill", ("features", "actions", "states"), ("prediction",), stateful=True),
        N("rollout", ("prediction",), ("prediction", "done"), stateful=True),
        N("plan", ("features", "goal_features", "actions", "states"), ("actions", "score", "iteration_scores"),
          stateful=True),
    ]


def _rollout_walk() -> Walk:
    loop = DynamicLoop(ROLLOUT_LOOP, "rollout", max_iters=MAX_ROLLOUT_STEPS,
                       stop=StopRule("rollout.done", stop_token_ids=(1,)))
    return Walk("rollout", Sequential("encode", "prefill", loop), [
        E("input.frames", "encode.frames"),
        E("encode.features", "prefill.features"),
        E("input.actions", "prefill.actions"),
        E("input.states", "prefill.states"),
        E("prefill.prediction", "rollout.prediction"),
        E("prefill.prediction", "output.first_prediction"),
        E("rollout.prediction", "output.prediction"),
    ])


def _plan_walk() -> Walk:
    return Walk("plan", Sequential(Parallel("encode", "encode_goal"), "plan"), [
        E("input.frames", "encode.frames"),
        E("input.goal", "encode_goal.goal"),
        E("encode.features", "plan.features"),
        E("encode_goal.goal_features", "plan.goal_features"),
        E("input.actions", "plan.actions"),
        E("input.states", "plan.states"),
        E("plan.actions", "output.actions"),
        E("plan.score", "output.score"),
        E("plan.iteration_scores", "output.iteration_scores"),
    ])


def _first_walk(inputs, wanted) -> str:
    return "plan" if "goal" in inputs else "rollout"


def world_graph(name: str = "vjepa2_ac") -> WalkGraph:
    return WalkGraph(name, _nodes(), [_rollout_walk(), _plan_walk()], first_walk=_first_walk)
