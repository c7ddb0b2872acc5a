"""Supervision under chaos: `starmesh up` with the speech and image models (tiny
checkpoints), 16 mixed concurrent requests, SIGKILL of one service process of each kind
in turn (bench.kill_round), for a few rounds.

    python -m bench.supervision --json out/supervision.json [--rounds 2] [--quick]
    figures = measure_chaos(rounds=2)        # what bench.chaos reports

Figures: requests_failed_unrelated (requests of a model that does not use the killed
process that failed; target 0), time_to_unavailable_ms_p99 (kill to a failed request's
UNAVAILABLE), restart_s (median, kill to SERVING again as the supervisor measured it),
leaked_blocks and leaked_segments (KV blocks and arena segments left after each round
settled; target 0), and what qualifies them: kills, requests_failed_related,
bad_failures (failures that are not UNAVAILABLE naming the killed process; target 0).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from bench.image import percentile
from bench.kill_round import IMAGE_MODEL, SPEECH_MODEL, RoundResult, kill_round
from bench.output import print_table, write_json
from bench.up_process import UpProcess

VICTIMS = ("thinker", "talker", "codec", "dit")
# --quick (and bench.chaos --quick): one kill, of the codec (the speech model's; the image
# model's requests are the unrelated ones), under 2 + 2 requests
QUICK = {"rounds": 1, "victims": ("codec",), "num_speech": 2, "num_image": 2}


def start_up(work_dir: str) -> tuple[UpProcess, object]:
    """`starmesh up` on the shipped local deployment, speech and image models only, with the
    tiny checkpoints (built once into the cache); (the running up, its Deployment)."""
    from cluster.checkpoints import tiny
    from cluster.launchable import read_launchable
    from cluster.shipped_deployments import rewrite_shipped

    checkpoints = {"omni": str(tiny("qwen3-omni", print)), "sd3": str(tiny("sd3", print))}
    path = rewrite_shipped("local", checkpoints, (SPEECH_MODEL, IMAGE_MODEL), str(work_dir))
    return UpProcess(path).start(), read_launchable(path)


def summarize(results: list[RoundResult]) -> dict:
    unavailable = [t for r in results for t in r.time_to_unavailable_ms]
    return {"requests_failed_unrelated": sum(r.failed_unrelated for r in results),
            "time_to_unavailable_ms_p99": percentile(unavailable, 0.99) if unavailable else float("nan"),
            "restart_s": statistics.median(r.restart_s for r in results),
            "leaked_blocks": sum(r.leaked_blocks for r in results),
            "leaked_segments": sum(r.leaked_segments for r in results),
            "kills": len(results), "requests_failed_related": sum(r.failed_related for r in results),
            "bad_failures": sum(len(r.bad_failures) for r in results),
            "served_again": all(r.served_again for r in results)}


def measure_chaos(rounds: int = 2, victims: tuple[str, ...] = VICTIMS, up: UpProcess | None = None,
                  deployment=None, num_speech: int = 8, num_image: int = 8, log=print) -> dict:
    """`rounds` x one kill per victim (module docstring); starts and stops its own
    `starmesh up` unless given one (`up` with its launched `deployment`)."""
    with tempfile.TemporaryDirectory(prefix="starmesh-chaos-") as work:
        own = up is None
        if own:
            up, deployment = start_up(work)
        try:
            results = []
            for r in range(rounds):
                for victim in victims:
                    result = kill_round(up, deployment, victim, num_speech, num_image)
                    log(f"round {r} {victim}: {result.failed_related} related / {result.failed_unrelated} unrelated "
                        f"failed, restart {result.restart_s:.2f} s, leaked {result.leaked or 'nothing'}")
                    results.append(result)
        finally:
            if own:
                up.stop()
    return summarize(results)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.supervision", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--rounds", type=int, default=2, help="kill rounds (one kill per victim each)")
    p.add_argument("--victims", default=",".join(VICTIMS), help="comma-separated service names to kill")
    p.add_argument("--quick", action="store_true", help="smoke run: one kill round of the codec alone, 2 + 2 requests")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    if args.quick:
        results = measure_chaos(**QUICK)
    else:
        results = measure_chaos(args.rounds, tuple(args.victims.split(",")))
    results["bench_wall_s"] = time.perf_counter() - t0
    print_table([("unrelated requests failed", "requests_failed_unrelated", ""),
                 ("time to UNAVAILABLE p99", "time_to_unavailable_ms_p99", "ms"),
                 ("restart (median)", "restart_s", "s"),
                 ("leaked KV blocks", "leaked_blocks", ""), ("leaked segments", "leaked_segments", ""),
                 ("non-UNAVAILABLE failures", "bad_failures", "")], results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
