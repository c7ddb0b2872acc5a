"""Tracing overhead: speech throughput at concurrency 16 with every process exporting
spans to the local trace store, against the same deployment with tracing off
(OTEL_SDK_DISABLED=true), both running at once and measured in rounds of one burst
each, the order alternating between rounds so drift (warm-up, other load) cancels;
the overhead is 1 - the median of the per-round traced/untraced ratios.

    python -m bench.tracing --json bench-results/tracing.json [--rounds 3] [--concurrency 16] [--quick]

Keys: traced_audio_s_per_s, untraced_audio_s_per_s, tracing_overhead (1 - traced /
untraced; target <= 0.03), num_spans (what the store received from the traced side).
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from bench.output import print_table, write_json

PARAMS = {"max_new_tokens": 16, "max_frames": 64, "min_frames": 64}
QUICK_PARAMS = {"max_new_tokens": 4, "max_frames": 9, "min_frames": 9}  # --quick: one round of one request


async def _burst(address: str, concurrency: int, params: dict = PARAMS) -> float:
    """Audio seconds per wall second of `concurrency` requests at once."""
    from client.speech import speak
    from engine.models.qwen3_omni.tiny import chat_prompt

    t0 = time.perf_counter()
    results = await asyncio.gather(*(speak(address, "qwen3-omni", chat_prompt(f"request {i}"), params)
                                     for i in range(concurrency)))
    return sum(r.audio_s for r in results) / (time.perf_counter() - t0)


def _deployment(checkpoint: str, directory: str):
    from cluster.shipped_deployments import rewrite_shipped

    return rewrite_shipped("colocated", {"omni": checkpoint}, ("qwen3-omni",), directory)


def measure(checkpoint: str, rounds: int, concurrency: int, params: dict = PARAMS) -> dict:
    from cluster.launchable import read_launchable
    from cluster.launcher import Cluster
    from cluster.trace_store import TraceStore

    store = TraceStore(max_traces=100000).start()
    with tempfile.TemporaryDirectory() as tmp:
        traced_path, untraced_path = _deployment(checkpoint, tmp), _deployment(checkpoint, tmp)
        quiet = lambda line: None  # noqa: E731
        traced = Cluster(read_launchable(traced_path), traced_path, trace_store=store.otlp_address, log=quiet)
        untraced = Cluster(read_launchable(untraced_path), untraced_path, log=quiet,
                           env={"OTEL_SDK_DISABLED": "true"})
        try:
            traced.start()
            untraced.start()
            asyncio.run(_burst(traced.conductor_address, 2, params))  # warm both (first-request costs)
            asyncio.run(_burst(untraced.conductor_address, 2, params))
            on, off = [], []
            for r in range(rounds):
                sides = [(off, untraced), (on, traced)]
                for results, cluster in (sides if r % 2 == 0 else sides[::-1]):
                    results.append(asyncio.run(_burst(cluster.conductor_address, concurrency, params)))
                print(f"round {r}: untraced {off[-1]:.2f}, traced {on[-1]:.2f} audio s/s", flush=True)
        finally:
            traced.stop()
            untraced.stop()
    num_spans = sum(len(v) for v in store._traces.values())
    store.stop()
    ratios = sorted(a / b for a, b in zip(on, off))
    return {"traced_audio_s_per_s": statistics.median(on), "untraced_audio_s_per_s": statistics.median(off),
            "tracing_overhead": 1 - statistics.median(ratios), "num_spans": num_spans,
            "concurrency": concurrency, "rounds": rounds}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--checkpoint", help="a Qwen3-Omni checkpoint (default: the cached tiny one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="smoke run: one round of one request, QUICK_PARAMS")
    args = p.parse_args(argv)
    params = PARAMS
    if args.quick:
        args.rounds, args.concurrency, params = 1, 1, QUICK_PARAMS
    checkpoint = args.checkpoint
    if checkpoint is None:
        from cluster.checkpoints import tiny

        checkpoint = str(tiny("qwen3-omni", print))  # the cached one `starmesh up` uses, built on first use
    results = measure(checkpoint, args.rounds, args.concurrency, params)
    print_table([("traced", "traced_audio_s_per_s", "audio s / s"),
                 ("untraced", "untraced_audio_s_per_s", "audio s / s"),
                 ("tracing overhead", "tracing_overhead", "(target <= 0.03)")], results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
