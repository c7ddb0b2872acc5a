"""`starmesh rollout`: a world-model rollout through a conductor; predictions stream per step.

    starmesh rollout --model vjepa2-ac --frames f.npy --actions a.npy --states s.npy --horizon 4 --json

Without --model, the first model the conductor lists that takes frames, actions and
states and gives predictions.
"""
from __future__ import annotations

import argparse
import json
import time

from cli.world_client import add_common, fail, generate, load_npy

OUTPUTS = ("prediction",)  # the walk output a rollout streams, one per step after the first


def add_parser(sub) -> None:
    p = sub.add_parser("rollout", help="roll a world model out from context frames and actions",
                       description="Context frames + per-timestep actions and states -> one predicted "
                                   "feature map per step (KV cache reused across steps).")
    add_common(p, OUTPUTS)
    p.add_argument("-o", "--output", metavar="OUT.npy", help="write the predictions [H, HW, D]")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    t0 = time.perf_counter()
    try:
        tensors = {name: load_npy(getattr(args, name)) for name in ("frames", "actions", "states")}
        model, out = generate(args, tensors, {"horizon": args.horizon} if args.horizon else {}, OUTPUTS)
        preds = np.stack(out.get("first_prediction", []) + out.get("prediction", []))   # [H, HW, D]
    except Exception as e:  # noqa: BLE001 - one line for the user, the exit status for scripts
        return fail("rollout", e)
    latency_ms = (time.perf_counter() - t0) * 1e3
    if args.output:
        np.save(args.output, preds)
    report = {"model": model, "horizon": int(preds.shape[0]), "prediction_shape": list(preds.shape[1:]),
              "latency_ms": round(latency_ms, 3), "output": args.output,
              "mean_abs": [round(float(np.abs(p).mean()), 6) for p in preds]}
    print(json.dumps(report) if args.json else f"{report['horizon']} predictions {report['prediction_shape']} "
                                                 f"in {latency_ms:.0f} ms")
    return 0
