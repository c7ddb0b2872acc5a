"""`starmesh plan`: cross-entropy-method planning towards a goal image through a conductor.

    starmesh plan --model vjepa2-ac --frames f.npy --actions a.npy --states s.npy --goal g.npy --json

Without --model, the first model the conductor lists that takes frames, actions, states
and a goal and gives a plan's actions and score.
"""
from __future__ import annotations

import argparse
import json
import time

from cli.world_client import add_common, fail, generate, load_npy

OUTPUTS = ("actions", "score", "iteration_scores")  # the plan walk's outputs


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="plan actions towards a goal image with a world model (CEM)",
                       description="Samples candidate action sequences, rolls each out, keeps the one whose "
                                   "last prediction is nearest (L1) to the goal's features.")
    add_common(p, OUTPUTS)
    p.add_argument("--goal", required=True, metavar="FILE.npy", help="goal frames [F, 3, H, W] float32")
    p.add_argument("--num-candidates", type=int, default=64)
    p.add_argument("--num-iterations", type=int, default=3)
    p.add_argument("--num-elites", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-share-prefix", action="store_true", help="every candidate recomputes the context")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    params = {"num_candidates": args.num_candidates, "num_iterations": args.num_iterations,
              "num_elites": args.num_elites, "seed": args.seed, "share_prefix": not args.no_share_prefix,
              **({"horizon": args.horizon} if args.horizon else {})}
    try:
        tensors = {name: load_npy(getattr(args, name)) for name in ("frames", "actions", "states", "goal")}
        model, out = generate(args, tensors, params, OUTPUTS)
        actions, score = out["actions"][0], float(out["score"][0][0])
    except Exception as e:  # noqa: BLE001
        return fail("plan", e)
    latency_ms = (time.perf_counter() - t0) * 1e3
    report = {"model": model, "actions": [[round(float(v), 6) for v in row] for row in actions],
              "score": score, "iteration_scores": [float(s) for s in out["iteration_scores"][0]],
              "latency_ms": round(latency_ms, 3)}
    print(json.dumps(report) if args.json else f"score {score:.6f} after {len(report['iteration_scores'])} "
                                                 f"iterations ({latency_ms:.0f} ms)")
    return 0
