"""World-model rollout benchmark: V-JEPA 2-AC rollouts with the KV cache reused across
steps (engine.models.vjepa2_ac) vs the recompute rollout (the whole growing prefix through the
block-causal pass at every step), and CEM planning with and without a shared prefix.

    python -m bench.rollout --json bench-results/rollout.json [--quick]

Shapes (pinned): a 16 x 16 patch grid per timestep (the real model's at 256 px) plus
action and state tokens (258 tokens per timestep), a random predictor of depth 6 and
width 256 (4 heads; encoder features 256 wide), fp32, --threads torch threads (1),
context 2 timesteps, batch 1. Inputs are random features: the arithmetic, not the
weights, sets the time. Both methods run the default loop (each prediction layer-normed
before it is fed back); plans use the 7-wide pose layout's CEM (clipped translations,
zero rotations, momentum, pose composition).

Keys (ratios against baselines measured in the same run, same inputs):
- recompute_ms_h{H} / cached_ms_h{H}: one rollout of horizon H = 4, 15, 30, the best of
  --repeats runs each (a run over 10 s once); speedup_h{H} = recompute over cached; flop_ratio_h{H} = the two
  methods' arithmetic (bench/rollout_flops.py), so speedup / flop_ratio says how much
  of the arithmetic's prediction the kernels keep.
- rollouts_per_s_b1 / rollouts_per_s_b8: rollouts of horizon --throughput-horizon (15)
  finished per second when 1 or 8 run together in the engine (batched steps).
- plan_ms / plan_ms_unshared: one CEM plan of 64 candidates x 3 iterations, context 4
  timesteps, horizon 4, candidates reading the context's shared KV blocks vs each
  computing its own; plan_sharing_speedup = unshared over shared. plan_size: the plan's
  candidates, iterations, elites and horizon.

--quick runs every part at its smallest (horizon 2, one run each, a plan of 4 candidates
x 1 iteration, horizon 2): a check that the benchmark runs, not figures to read.
"""
from __future__ import annotations

import argparse
import time

import torch

from bench.output import print_table, write_json
from bench.rollout_flops import cached_flops, recompute_flops

GRID, WIDTH, DEPTH, HEADS, EMBED = 16, 256, 6, 4, 256
NUM_CONTEXT = 2
HORIZONS = (4, 15, 30)


def build_predictor():
    from engine.models.vjepa2_ac.tiny import tiny_predictor

    return tiny_predictor(EMBED, GRID, seed=0, predictor_embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS,
                          max_timesteps=32)


def inputs(num_context: int, num_steps: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(num_context, GRID * GRID, EMBED, generator=g), torch.randn(num_steps, 7, generator=g),
            torch.randn(num_steps, 7, generator=g))


def best_ms(fn, repeats: int, budget_s: float = 10.0) -> float:
    """The best of `repeats` runs; a run longer than budget_s is not repeated (the
    recompute rollout of horizon 30 takes minutes at one thread)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if times[-1] > budget_s * 1e3:
            break
    return min(times)


def make_engine(predictor, num_blocks: int):
    from engine.models.vjepa2_ac.rollout_engine import RolloutConfig, RolloutEngine

    return RolloutEngine(predictor, RolloutConfig(num_blocks=num_blocks, max_batch=64))


def cached_rollouts(engine, cases: list) -> None:
    """Runs `cases` to their end on `engine` (its pool allocated beforehand, as a service
    allocates it once at start)."""
    from engine.models.vjepa2_ac.rollouts import Rollout

    for i, (feats, actions, states, horizon) in enumerate(cases):
        engine.add(Rollout(f"r{i}", feats, actions, states, horizon))
    while engine.has_work():
        engine.step()
    engine.check_integrity()


def horizons(predictor, repeats: int, values=HORIZONS) -> dict:
    from engine.models.vjepa2_ac.recompute import recompute_rollout

    out = {}
    for h in values:
        feats, actions, states = inputs(NUM_CONTEXT, NUM_CONTEXT + h - 1, seed=h)
        with torch.no_grad():
            recompute = best_ms(lambda: recompute_rollout(predictor, feats[None], actions[None], states[None], h),
                                repeats)
        engine = make_engine(predictor, 40)
        cached = best_ms(lambda: cached_rollouts(engine, [(feats, actions, states, h)]), repeats)
        out |= {f"recompute_ms_h{h}": recompute, f"cached_ms_h{h}": cached, f"speedup_h{h}": recompute / cached,
                f"flop_ratio_h{h}": recompute_flops(predictor.config, NUM_CONTEXT, h)
                / cached_flops(predictor.config, NUM_CONTEXT, h)}
        print(f"h{h}: recompute {recompute:.0f} ms, cached {cached:.0f} ms", flush=True)
    return out


def throughput(predictor, horizon: int, repeats: int) -> dict:
    out = {"throughput_horizon": horizon}
    for batch in (1, 8):
        cases = [(*inputs(NUM_CONTEXT, NUM_CONTEXT + horizon - 1, seed=i), horizon) for i in range(batch)]
        engine = make_engine(predictor, 40 * batch)
        out[f"rollouts_per_s_b{batch}"] = batch / (best_ms(lambda: cached_rollouts(engine, cases), repeats) / 1e3)
    return out


PLAN = dict(num_candidates=64, num_iterations=3, num_elites=8, horizon=4)
QUICK_PLAN = dict(num_candidates=4, num_iterations=1, num_elites=2, horizon=2)  # --quick: ~1/100 of the work


def plans(predictor, repeats: int, size: dict = PLAN) -> dict:
    from engine.models.vjepa2_ac.planner import CemPlan, PlanConfig, run_plan

    feats, actions, states = inputs(4, 4, seed=99)
    goal = torch.randn(GRID * GRID, EMBED, generator=torch.Generator().manual_seed(7))

    engine = make_engine(predictor, 64 * 8)

    def plan(share: bool) -> None:
        config = PlanConfig(**size, share_prefix=share)
        run_plan(CemPlan(engine, "plan", feats, actions[:3], states, goal, config))
        engine.check_integrity()

    shared, unshared = best_ms(lambda: plan(True), repeats), best_ms(lambda: plan(False), repeats)
    return {"plan_ms": shared, "plan_ms_unshared": unshared, "plan_sharing_speedup": unshared / shared}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure, the best kept (a run over 10 s "
                                                             "is not repeated)")
    ap.add_argument("--throughput-horizon", type=int, default=15)
    ap.add_argument("--horizons", default="4,15,30", help="rollout horizons to time (comma-separated)")
    ap.add_argument("--skip-plan", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--quick", action="store_true", help="smoke run: horizon 2, one repeat, a plan of 4 candidates x 1 "
                                                         "iteration (plan_size in the JSON)")
    args = ap.parse_args(argv)
    plan_size = PLAN
    if args.quick:
        args.repeats, args.horizons, args.throughput_horizon, plan_size = 1, "2", 2, QUICK_PLAN
    torch.set_num_threads(args.threads)
    predictor = build_predictor()
    results = {"threads": args.threads, "num_context": NUM_CONTEXT, "grid": GRID, "width": WIDTH, "depth": DEPTH}
    chosen = tuple(int(h) for h in args.horizons.split(","))
    results |= horizons(predictor, args.repeats, chosen)
    results |= throughput(predictor, args.throughput_horizon, args.repeats)
    if not args.skip_plan:
        results |= plans(predictor, args.repeats, plan_size) | {"plan_size": plan_size}
    rows = [(f"speedup h={h}", f"speedup_h{h}", "x") for h in chosen]
    rows += [(f"flop ratio h={h}", f"flop_ratio_h{h}", "x") for h in chosen]
    rows += [("rollouts/s batch 1", "rollouts_per_s_b1", "/s"), ("rollouts/s batch 8", "rollouts_per_s_b8", "/s"),
             ("plan (shared prefix)", "plan_ms", "ms"), ("plan (unshared)", "plan_ms_unshared", "ms"),
             ("plan sharing speedup", "plan_sharing_speedup", "x")]
    print_table(rows, results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
