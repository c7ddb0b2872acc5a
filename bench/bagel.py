"""BAGEL through the mesh (bench/bagel_mesh.py): CFG-parallel, what the mesh adds over the
in-process runner, batched understanding and follow-up edits on a kept context.

    python -m bench.bagel --json bench-results/bagel.json [--quick]

Checkpoint: `make-tiny bagel` widened (hidden 512, MLP 1536, 2 layers, 8 heads; ViT 128
wide), fp32, built on first use, with images of 256x256 (256 latent tokens per denoising
query, 256 ViT tokens per understood image). At that width one branch's denoising
forward costs tens of milliseconds at one thread, so the figures measure the backbone's
work and how the mesh places it, not Python per step; at the tiny test width (64) a step
is a few milliseconds, of which the mesh's per-step round trip is most. Every process
runs --threads torch threads (1: CFG-parallel then uses one core per replica). Each
figure pairs its run with its baseline in the same round, alternating which goes first,
and reports the median of the paired ratios over --rounds. Keys:

- t2i_cfg_parallel_speedup: a text-to-image denoising step (the step events' spacing)
  with both guidance branches batched in one forward on one replica, over the same with
  the cfg_text branch on a second replica (goal >= 1.3);
- edit_cfg_parallel_speedup: the same for an edit's three branches (gen on one replica,
  cfg_text and cfg_img batched on the other; 1.5 is the bound on two cores; goal >= 1.3);
- t2i_mesh_over_inprocess_p50: text-to-image request latency through the mesh (one
  replica: the denoising loop runs inside it) over pipelines/bagel/runner.py doing the
  same work in this process, the PNG the mesh's client gets included (the runner's image
  encoded by the conductor's own encoder) (<= 1.05); t2i_mesh_update_ms and
  t2i_inprocess_update_ms: one denoising update of the same pairs (the step events'
  spacing, the runner's on_step calls'); t2i_fused_over_fanout_p50: the same request's
  latency with the loop run inside the backbone over the conductor driving it (velocity
  runs, then combine, each update), both on one replica of the same process;
- und_batch16_over_sequential: 16 understanding requests (an image and a question, a
  16-token answer: --answer-tokens) at once over one at a time, in requests per second
  (goal >= 3);
- followup_first_step_speedup: an edit's time to its first denoising step from scratch
  (image + instruction) over the same edit continuing a kept "describe this image"
  context (goal >= 2); followup_prefill_tokens_saved: of the follow-up's context rows,
  the share it did not compute (the backbone's rows_written counter).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time

from bench.bagel_mesh import CFGP, FANOUT, ONE, BagelBenchMesh, request, run
from bench.output import print_table, write_json

SPEC = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=4, vit_hidden_size=128, vit_intermediate_size=256, vit_layers=3, vit_heads=4)
IMAGES = {"vae_image_max": 256, "vae_image_min": 128, "vit_image_max": 224, "vit_image_min": 112}
SIZE = 256
PROMPT, QUESTION, EDIT = "a red fox in the snow at dawn", "describe this image", "now make it snowy"
GUIDED = dict(cfg_text_scale=4.0, cfg_interval_start=0.0, seed=1)   # every step guided
QUICK = dict(rounds=1, steps=3, concurrent=4, answer=4)


def checkpoint() -> str:
    from engine.models.bagel.tiny import TinyBagelSpec, make_tiny_bagel

    path = os.path.join(tempfile.gettempdir(), "starmesh-bench-bagel")
    if not os.path.exists(os.path.join(path, "bagel_defaults.json")):
        make_tiny_bagel(path, seed=0, spec=TinyBagelSpec(**SPEC))
        with open(os.path.join(path, "bagel_defaults.json"), "w") as f:
            json.dump(IMAGES, f)
    return path


def picture(seed: int):
    import numpy as np
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8))


def _paired(ratios: list[float]) -> float:
    return round(statistics.median(ratios), 4)


def _t2i(steps: int) -> dict:
    """A guided text-to-image request's params (cfg_text only: no image branch)."""
    return dict(GUIDED, steps=steps, width=SIZE, height=SIZE, cfg_img_scale=1.0)


async def _pair(first, second, i: int):
    """Both coroutine factories' results, the order alternating with round i."""
    if i % 2:
        b = await second()
        return await first(), b
    a = await first()
    return a, await second()


async def cfg_parallel(stub, rounds: int, steps: int) -> dict:
    t2i = _t2i(steps)
    edit = dict(GUIDED, steps=steps, cfg_img_scale=2.0)
    out: dict[str, list[float]] = {"t2i": [], "edit": []}
    for i in range(rounds + 1):  # round 0 warms both placements up
        one, two = await _pair(lambda: run(stub, request(ONE, PROMPT, **t2i)),
                               lambda: run(stub, request(CFGP, PROMPT, **t2i)), i)
        e1, e2 = await _pair(lambda: run(stub, request(ONE, EDIT, [picture(1)], **edit)),
                             lambda: run(stub, request(CFGP, EDIT, [picture(1)], **edit)), i)
        if i:
            out["t2i"].append(one.step_ms / two.step_ms)
            out["edit"].append(e1.step_ms / e2.step_ms)
            out.setdefault("t2i_one", []).append(one.step_ms)
            out.setdefault("t2i_two", []).append(two.step_ms)
            out.setdefault("edit_one", []).append(e1.step_ms)
            out.setdefault("edit_two", []).append(e2.step_ms)
    return {"t2i_cfg_parallel_speedup": _paired(out["t2i"]), "edit_cfg_parallel_speedup": _paired(out["edit"]),
            **{f"{k}_step_ms": round(statistics.median(v), 2) for k, v in out.items() if "_" in k}}


async def mesh_over_inprocess(stub, runner, rounds: int, steps: int) -> dict:
    from conductor.png import encode_png
    from engine.models.bagel.params import BagelParams

    params = _t2i(steps)

    async def inprocess():  # the same product as the mesh's Image event: PNG bytes
        steps_at = []
        t0 = time.perf_counter()
        out = runner.run([PROMPT], BagelParams(**params), on_step=lambda k, n: steps_at.append(time.perf_counter()))
        encode_png(out.image)
        return (time.perf_counter() - t0) * 1e3, _spacing_ms(steps_at)

    async def mesh():
        out = await run(stub, request(ONE, PROMPT, **params))
        return out.latency_ms, out.step_ms

    ratios, lat, step = [], [], []
    for i in range(rounds + 1):
        (m, m_step), (r, r_step) = await _pair(mesh, inprocess, i)
        if i:
            ratios.append(m / r)
            lat.append((m, r))
            step.append((m_step, r_step))
    return {"t2i_mesh_over_inprocess_p50": _paired(ratios),
            "t2i_mesh_p50_ms": round(statistics.median(m for m, _ in lat), 1),
            "t2i_inprocess_p50_ms": round(statistics.median(r for _, r in lat), 1),
            "t2i_mesh_update_ms": round(statistics.median(m for m, _ in step), 2),
            "t2i_inprocess_update_ms": round(statistics.median(r for _, r in step), 2)}


async def fused_over_fanout(stub, rounds: int, steps: int) -> dict:
    params = _t2i(steps)
    ratios, lat = [], []
    for i in range(rounds + 1):
        fused, fanned = await _pair(lambda: run(stub, request(ONE, PROMPT, **params)),
                                    lambda: run(stub, request(FANOUT, PROMPT, **params)), i)
        if i:
            ratios.append(fused.latency_ms / fanned.latency_ms)
            lat.append((fused.step_ms, fanned.step_ms))
    return {"t2i_fused_over_fanout_p50": _paired(ratios),
            "t2i_fused_update_ms": round(statistics.median(f for f, _ in lat), 2),
            "t2i_fanout_update_ms": round(statistics.median(o for _, o in lat), 2)}


def _spacing_ms(times: list[float]) -> float:
    """The median gap between consecutive times (s), in ms: one denoising update."""
    return statistics.median(b - a for a, b in zip(times, times[1:])) * 1e3


async def understanding(stub, rounds: int, n: int, answer: int) -> dict:
    reqs = lambda: [request(ONE, QUESTION, [picture(10 + k)], text=True, max_new_tokens=answer)  # noqa: E731
                    for k in range(n)]

    async def together():
        t0 = time.perf_counter()
        done = await asyncio.gather(*(run(stub, r) for r in reqs()))
        return n / (time.perf_counter() - t0), sum(d.text_tokens for d in done)

    async def one_by_one():
        t0 = time.perf_counter()
        done = [await run(stub, r) for r in reqs()]
        return n / (time.perf_counter() - t0), sum(d.text_tokens for d in done)

    ratios, rates, tokens = [], [], []
    for i in range(rounds + 1):
        (batched, t_b), (alone, t_a) = await _pair(together, one_by_one, i)
        if i:
            ratios.append(batched / alone)
            rates.append((batched, alone))
            tokens.append((t_b, t_a))
    return {"und_batch16_over_sequential": _paired(ratios), "und_concurrency": n,
            "und_batched_req_per_s": round(statistics.median(b for b, _ in rates), 3),
            "und_sequential_req_per_s": round(statistics.median(a for _, a in rates), 3),
            "und_answer_tokens_batched": tokens[-1][0], "und_answer_tokens_sequential": tokens[-1][1]}


async def followup(stub, mesh: BagelBenchMesh, rounds: int, steps: int) -> dict:
    edit = dict(GUIDED, steps=steps, cfg_img_scale=2.0)
    speedups, saved, firsts = [], [], []

    async def scratch():
        return await run(stub, request(ONE, EDIT, [picture(2)], **edit))

    async def continued():
        before = mesh.counters()["rows_written"]
        kept = await run(stub, request(ONE, QUESTION, [picture(2)], text=True, max_new_tokens=8, keep_context=True))
        middle = mesh.counters()["rows_written"]
        out = await run(stub, request(ONE, EDIT, [picture(2)], context_id=kept.context_id, **edit))
        after = mesh.counters()["rows_written"]
        return out, (middle - before, after - middle)

    for i in range(rounds + 1):
        fresh, (cont, (kept_rows, new_rows)) = await _pair(scratch, continued, i)
        if i:
            speedups.append(fresh.first_step_ms / cont.first_step_ms)
            saved.append(kept_rows / (kept_rows + new_rows))
            firsts.append((fresh.first_step_ms, cont.first_step_ms))
    return {"followup_first_step_speedup": _paired(speedups), "followup_prefill_tokens_saved": _paired(saved),
            "scratch_first_step_ms": round(statistics.median(f for f, _ in firsts), 1),
            "followup_first_step_ms": round(statistics.median(c for _, c in firsts), 1)}


async def measure_async(mesh: BagelBenchMesh, runner, rounds: int, steps: int, concurrent: int, answer: int) -> dict:
    import grpc

    from protos.starmesh.v1 import conductor_pb2_grpc

    async with grpc.aio.insecure_channel(mesh.conductor.address) as channel:
        stub = conductor_pb2_grpc.ConductorStub(channel)
        results = await cfg_parallel(stub, rounds, steps)
        results |= await mesh_over_inprocess(stub, runner, rounds, steps)
        results |= await fused_over_fanout(stub, rounds, steps)
        results |= await understanding(stub, rounds, concurrent, answer)
        results |= await followup(stub, mesh, rounds, steps)
    return results


def measure(rounds: int = 5, steps: int = 8, concurrent: int = 16, answer: int = 16, threads: int = 1) -> dict:
    import torch

    from engine.models.bagel.parts import BagelParts
    from pipelines.bagel.runner import BagelRunner

    torch.set_num_threads(threads)
    path = checkpoint()
    runner = BagelRunner(BagelParts.load(path))
    with BagelBenchMesh(path, threads) as mesh:
        results = asyncio.run(measure_async(mesh, runner, rounds, steps, concurrent, answer))
    return {**results, "rounds": rounds, "steps": steps, "threads": threads, "image_size": SIZE,
            "hidden_size": SPEC["hidden_size"]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--quick", action="store_true", help="the smallest run that takes every path (suite)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    ap.add_argument("--answer-tokens", type=int, default=16,
                    help="max_new_tokens of each understanding request (its answer's length)")
    args = ap.parse_args(argv)
    if args.steps < 3:
        ap.error(f"--steps {args.steps}: at least 3 (an update is timed between two step events)")
    sizes = QUICK if args.quick else dict(rounds=args.rounds, steps=args.steps, concurrent=16,
                                          answer=args.answer_tokens)
    results = measure(threads=args.threads, **sizes)
    print_table([("t2i cfg-parallel speedup", "t2i_cfg_parallel_speedup", "x"),
                 ("edit cfg-parallel speedup", "edit_cfg_parallel_speedup", "x"),
                 ("t2i mesh / in-process p50", "t2i_mesh_over_inprocess_p50", "x"),
                 ("t2i fused / fan-out loop p50", "t2i_fused_over_fanout_p50", "x"),
                 ("understand batched / seq", "und_batch16_over_sequential", "x"),
                 ("follow-up first step", "followup_first_step_speedup", "x"),
                 ("follow-up rows saved", "followup_prefill_tokens_saved", "")], results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
