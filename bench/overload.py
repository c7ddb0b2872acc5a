"""Overload: many more speech requests at once than the conductor admits.

    python -m bench.overload --json bench-results/overload.json [--quick]

The speech mesh (bench.speech_mesh, tiny Qwen3-Omni) with `omni` limited to
max_in_flight + max_waiting requests; `factor` times that many requests start at once.
Keys: overload_requests, overload_refused (RESOURCE_EXHAUSTED with a retry hint),
overload_refusal_ms_p99 (how fast a refusal comes), overload_admitted,
overload_admitted_ttfa_ms_p99 and ttfa_ms_alone (one request on the idle mesh; their
ratio overload_ttfa_p99_over_alone), overload_rss_growth_mb (the largest resident-memory
growth of the conductor's process and the services over the burst).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import time

from bench.fuzz_mesh import rss_mb
from bench.output import write_json
from runtime.edge_stats import percentile

QUICK = {"max_in_flight": 1, "max_waiting": 1, "factor": 2, "frames": 9, "text_tokens": 4}  # --quick, chaos --quick


def p99(values: list[float]) -> float:
    return percentile(sorted(values), 0.99)  # 0.0 when there are none


async def _burst(address: str, prompts: list, params: dict, num: int) -> tuple[list, list]:
    """(summaries of the admitted, milliseconds to each refusal)."""
    import grpc

    from client.speech import speak

    async def one(i: int):
        t0 = time.perf_counter()
        try:
            return await speak(address, "omni", prompts[i % len(prompts)], params, timeout_s=600)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            return 1000 * (time.perf_counter() - t0)

    results = await asyncio.gather(*(one(i) for i in range(num)))
    return [r for r in results if not isinstance(r, float)], [r for r in results if isinstance(r, float)]


def measure_overload(ckpt: str, max_in_flight: int = 4, max_waiting: int = 4, factor: int = 4,
                     frames: int = 50, text_tokens: int = 16) -> dict:
    from bench.speech_mesh import SpeechMesh
    from conductor.admission import Admission, AdmissionConfig
    from engine.models.qwen3_omni.tiny import chat_prompt

    prompts = [chat_prompt(p) for p in ("Hello there", "Tell me a story", "abc", "sing a song")]
    params = {"max_new_tokens": text_tokens, "max_frames": frames, "min_frames": frames}
    admission = Admission({"omni": AdmissionConfig(max_in_flight=max_in_flight, max_waiting=max_waiting)})
    num = factor * (max_in_flight + max_waiting)
    with SpeechMesh(ckpt, admission=admission) as mesh:
        from client.speech import speak

        asyncio.run(speak(mesh.address, "omni", prompts[0], {**params, "max_frames": 9, "min_frames": 9}))
        alone = asyncio.run(speak(mesh.address, "omni", prompts[1], params)).ttfa_ms
        pids = [os.getpid()] + [p.pid for p in mesh.procs.values()]
        before = {pid: rss_mb(pid) for pid in pids}
        admitted, refusals = asyncio.run(_burst(mesh.address, prompts, params, num))
        growth = max(rss_mb(pid) - before[pid] for pid in pids)
    ttfa = [s.ttfa_ms for s in admitted if s.ttfa_ms is not None]
    return {"overload_requests": num, "overload_refused": len(refusals), "overload_refusal_ms_p99": p99(refusals),
            "overload_admitted": len(admitted), "overload_admitted_ttfa_ms_p99": p99(ttfa),
            "ttfa_ms_alone": alone, "overload_ttfa_p99_over_alone": p99(ttfa) / alone if alone else 0.0,
            "overload_rss_growth_mb": growth, "admission": {"max_in_flight": max_in_flight,
                                                            "max_waiting": max_waiting}}


def main(argv=None) -> None:
    from bench.speech import checkpoint

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--checkpoint", metavar="DIR", help="a Qwen3-Omni checkpoint (default: the tiny one)")
    p.add_argument("--max-in-flight", type=int, default=4)
    p.add_argument("--max-waiting", type=int, default=4)
    p.add_argument("--factor", type=int, default=4, help="requests at once = factor x (in flight + waiting)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 in flight + 1 waiting, factor 2, 9 frames")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.quick:
        out = measure_overload(checkpoint(args), **QUICK)
    else:
        out = measure_overload(checkpoint(args), args.max_in_flight, args.max_waiting, args.factor)
    for key, value in out.items():
        print(f"{key:34s} {value}")
    write_json(args.json, out)


if __name__ == "__main__":
    main()
