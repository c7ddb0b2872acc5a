"""Image generation benchmark: the SD3 mesh vs diffusers' StableDiffusion3Pipeline.

    python -m bench.image --json bench-results/image.json [--quick]

Checkpoint: engine.models.sd3.tiny's "bench" preset (random, 2.5 M DiT parameters, 16 latent
channels), built on first use; 256x256 images (256 image tokens) with 77 + 77 text
tokens, where one CFG step (a DiT call of batch 2) costs ~45 ms at one thread. Every
process (the services and this one, where diffusers runs) uses --threads torch threads.

Mesh: `starmesh serve sd3` (text encoders + DiT + VAE, one process) and a second
`starmesh serve dit` replica as processes on loopback; the conductor and the client
run in this process. Three models over them: "sd3_fused" (every node on the first
process, the CFG loop inside its DiT: node denoise_loop), "sd3" (the same placement,
the loop driven by the conductor: Parallel(cond, uncond) -> combine, both branches one
batch of 2) and "sd3_cfgp" (as "sd3" with denoise_uncond on the second replica).

Keys (ratios against baselines measured in the same run):
- mesh_p50_ms / mesh_p95_ms ("sd3_fused"), diffusers_p50_ms / diffusers_p95_ms: request
  latency at concurrency 1 (prompt -> image), --requests runs each;
  mesh_over_diffusers_p50. loop_* are the same figures for "sd3" (a conductor round
  trip per branch join and per update).
- cfg_parallel_speedup: the denoising loop's time per step (between step events) of
  "sd3" (one replica running both branches as a batch of 2) over "sd3_cfgp".
- cfg_parallel_predicted: formula (5) of the notes, T_serial / T_parallel with
  T_serial = t_cond + t_uncond + u and T_parallel = max(t_cond, t_uncond) + u + c, where t
  is one branch (a DiT call of batch 1) and u the guidance + Euler update, both measured
  in this process, and c the per-step coordination overhead of the mesh (its step
  time on one replica minus the batch-of-2 call and u). The measured baseline is the
  conductor-driven loop on one replica, which pays c as well: its prediction is
  cfg_parallel_predicted_with_c = (T_serial + c) / T_parallel.
- mesh_img_per_s / diffusers_img_per_s: --concurrency requests at once through the
  mesh ("sd3_fused", batching across requests; loop_img_per_s for "sd3") vs the same
  requests through diffusers one after another.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

from bench.output import print_table, write_json
from bench.service_mesh import ServiceMesh

PROMPT = "a watercolour fox in a snowy forest at dawn"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def checkpoint(args) -> str:
    from engine.models.sd3.tiny import make_tiny_sd3

    if args.checkpoint:
        return args.checkpoint
    path = os.path.join(tempfile.gettempdir(), "starmesh-bench-sd3")
    if not os.path.exists(os.path.join(path, "model_index.json")):
        make_tiny_sd3(path, seed=0, preset="bench")
    return path


def params(args, seed: int = 0) -> dict:
    return {"steps": args.steps, "guidance": 7.0, "width": args.width, "height": args.height, "seed": seed,
            "max_sequence_length": args.max_sequence_length}


def timed(fn, repeats: int = 5) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def measure_parts(ckpt: str, args) -> dict:
    """One branch (DiT batch 1), both as a batch of 2, and the update u, in this process."""
    import torch

    from engine.models.sd3.dit import Sd3Dit
    from engine.models.sd3.guidance import euler_step, guide

    dit = Sd3Dit.load(ckpt)
    c, h, w = dit.geometry.latent_channels, args.height // 8, args.width // 8
    seq = dit.transformer.config.joint_attention_dim, dit.transformer.config.pooled_projection_dim
    tokens = 77 + args.max_sequence_length

    def call(batch: int):
        x, e, p = torch.randn(batch, c, h, w), torch.randn(batch, tokens, seq[0]), torch.randn(batch, seq[1])
        t = torch.full((batch,), 500.0)
        return lambda: dit.denoise([(x[i:i + 1], e[i:i + 1], p[i:i + 1], t[i]) for i in range(batch)])

    z, v1, v2 = (torch.randn(1, c, h, w) for _ in range(3))
    sig = torch.tensor([0.8, 0.7])
    return {"branch_ms": timed(call(1)), "batch2_ms": timed(call(2)),
            "update_ms": timed(lambda: euler_step(z, guide(v1, v2, 7.0), sig[0], sig[1]), 20)}


def run_diffusers(ckpt: str, args) -> dict:
    import torch

    from engine.models.sd3.tiny import load_reference_pipeline

    pipe = load_reference_pipeline(ckpt)
    pipe.set_progress_bar_config(disable=True)
    p = params(args)
    step_ms: list[float] = []

    def one(seed: int) -> float:
        stamps = []

        def on_step(_pipe, _i, _t, kwargs):
            stamps.append(time.perf_counter())
            return kwargs

        t0 = time.perf_counter()
        pipe(PROMPT, num_inference_steps=p["steps"], guidance_scale=p["guidance"], height=p["height"],
             width=p["width"], max_sequence_length=p["max_sequence_length"], output_type="np",
             generator=torch.Generator().manual_seed(seed), callback_on_step_end=on_step)
        step_ms.append((stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e3)
        return (time.perf_counter() - t0) * 1e3

    one(0)  # warm-up
    lat = [one(i) for i in range(args.requests)]
    t0 = time.perf_counter()
    for i in range(args.concurrency):
        one(i)
    return {"diffusers_p50_ms": statistics.median(lat), "diffusers_p95_ms": percentile(lat, 0.95),
            "diffusers_step_ms": statistics.median(step_ms),
            "diffusers_img_per_s": args.concurrency / (time.perf_counter() - t0)}


class Mesh(ServiceMesh):
    """Two service processes and a conductor (in this process) serving sd3 and sd3_cfgp."""

    def __init__(self, ckpt: str, threads: int) -> None:
        from runtime.process import ServiceProcess

        common = ["--checkpoint", ckpt, "--torch-threads", str(threads), "--log-level", "WARNING"]
        super().__init__([ServiceProcess("sd3", common, name="sd3", start_timeout_s=180),
                          ServiceProcess("dit", common, name="dit_b", start_timeout_s=180)], self._models)

    @staticmethod
    def _models(addresses: list[str]) -> list:
        from pipelines.sd3.model import served_model

        main, dit_b = addresses
        return [served_model("sd3", main, main, main), served_model("sd3_cfgp", main, main, main, dit_b),
                served_model("sd3_fused", main, main, main, fused=True)]

    async def request(self, stub, model: str, p: dict) -> tuple[float, list[float]]:
        """(latency ms, arrival times of the step events)."""
        from protos.starmesh.v1 import conductor_pb2 as pb
        from transport.codec import inline_ref
        from transport.ref_proto import ref_to_proto
        import torch

        req = pb.GenerateRequest(model=model)
        prompt = torch.tensor(list(PROMPT.encode()), dtype=torch.uint8)  # [n] UTF-8 bytes
        ref_to_proto(inline_ref(prompt), req.inputs.add(name="prompt").tensor)
        req.params.update(p)
        t0, steps, got_image = time.perf_counter(), [], False
        async for ev in stub.Generate(req, timeout=600):
            steps += [time.perf_counter()] if ev.WhichOneof("kind") == "step" else []
            got_image |= ev.WhichOneof("kind") == "image"
        assert got_image and len(steps) == p["steps"], (model, len(steps))
        return (time.perf_counter() - t0) * 1e3, steps

    async def sequential(self, model: str, args) -> tuple[list[float], list[float]]:
        """Latencies and per-step loop times of --requests runs at concurrency 1."""
        import grpc

        from protos.starmesh.v1 import conductor_pb2_grpc

        async with grpc.aio.insecure_channel(self.conductor.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)
            await self.request(stub, model, params(args))  # warm-up
            lat, step_ms = [], []
            for i in range(args.requests):
                ms, steps = await self.request(stub, model, params(args, i))
                lat.append(ms)
                step_ms.append((steps[-1] - steps[0]) / (len(steps) - 1) * 1e3)
            return lat, step_ms

    async def concurrent(self, model: str, args) -> float:
        import grpc

        from protos.starmesh.v1 import conductor_pb2_grpc

        async with grpc.aio.insecure_channel(self.conductor.address) as channel:
            stub = conductor_pb2_grpc.ConductorStub(channel)
            t0 = time.perf_counter()
            await asyncio.gather(*(self.request(stub, model, params(args, i)) for i in range(args.concurrency)))
            return args.concurrency / (time.perf_counter() - t0)


def run_mesh(ckpt: str, args) -> dict:
    out = {}
    with Mesh(ckpt, args.threads) as mesh:
        for model, prefix in (("sd3_fused", "mesh"), ("sd3", "loop"), ("sd3_cfgp", "cfgp")):
            lat, step_ms = asyncio.run(mesh.sequential(model, args))
            out.update({f"{prefix}_p50_ms": statistics.median(lat), f"{prefix}_p95_ms": percentile(lat, 0.95),
                        f"{prefix}_step_ms": statistics.median(step_ms)})
        out["mesh_img_per_s"] = asyncio.run(mesh.concurrent("sd3_fused", args))
        out["loop_img_per_s"] = asyncio.run(mesh.concurrent("sd3", args))
    return out


def derive(r: dict) -> dict:
    coordination = max(0.0, r["loop_step_ms"] - r["batch2_ms"] - r["update_ms"])
    serial = 2 * r["branch_ms"] + r["update_ms"]
    parallel = r["branch_ms"] + r["update_ms"] + coordination
    return {"mesh_over_diffusers_p50": r["mesh_p50_ms"] / r["diffusers_p50_ms"],
            "loop_over_diffusers_p50": r["loop_p50_ms"] / r["diffusers_p50_ms"],
            "cfg_parallel_speedup": r["loop_step_ms"] / r["cfgp_step_ms"],
            "coordination_ms": coordination, "cfg_parallel_predicted": serial / parallel,
            "cfg_parallel_predicted_with_c": (serial + coordination) / parallel}


ROWS = [("mesh p50 (c=1, fused loop)", "mesh_p50_ms", "ms"), ("mesh p95 (c=1, fused loop)", "mesh_p95_ms", "ms"),
        ("diffusers p50 (c=1)", "diffusers_p50_ms", "ms"), ("diffusers p95 (c=1)", "diffusers_p95_ms", "ms"),
        ("mesh / diffusers p50", "mesh_over_diffusers_p50", "x (target <= 1.1)"),
        ("conductor loop p50 (c=1)", "loop_p50_ms", "ms"),
        ("conductor loop / diffusers p50", "loop_over_diffusers_p50", "x"),
        ("branch (DiT batch 1)", "branch_ms", "ms"), ("both branches (batch 2)", "batch2_ms", "ms"),
        ("update (guidance + Euler)", "update_ms", "ms"), ("step, diffusers", "diffusers_step_ms", "ms"),
        ("step, fused loop", "mesh_step_ms", "ms"),
        ("step, conductor loop", "loop_step_ms", "ms"), ("step, CFG-parallel", "cfgp_step_ms", "ms"),
        ("coordination per step", "coordination_ms", "ms"),
        ("cfg_parallel_speedup", "cfg_parallel_speedup", "x (target >= 1.25)"),
        ("cfg_parallel_predicted (5)", "cfg_parallel_predicted", "x"),
        ("  same, baseline paying c too", "cfg_parallel_predicted_with_c", "x"),
        ("mesh img/s (c=8, fused loop)", "mesh_img_per_s", "img/s"),
        ("mesh img/s (c=8, conductor loop)", "loop_img_per_s", "img/s"),
        ("diffusers img/s (serial)", "diffusers_img_per_s", "img/s")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="an SD3 checkpoint (default: the bench preset, built on first use)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--height", type=int, default=256)
    ap.add_argument("--max-sequence-length", type=int, default=77)
    ap.add_argument("--requests", type=int, default=8, help="runs per latency measurement (concurrency 1)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--quick", action="store_true", help="smoke run: 64x64, 2 steps (a step time needs two), "
                                                         "8 T5 tokens, 1 request, concurrency 2")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.width, args.height, args.max_sequence_length = 2, 64, 64, 8
        args.requests, args.concurrency = 1, 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    ckpt = checkpoint(args)
    results = {"steps": args.steps, "width": args.width, "height": args.height, "threads": args.threads,
               "requests": args.requests, "concurrency": args.concurrency}
    results.update(measure_parts(ckpt, args))
    results.update(run_diffusers(ckpt, args))
    results.update(run_mesh(ckpt, args))
    results.update(derive(results))
    print_table(ROWS, results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
