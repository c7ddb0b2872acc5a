"""Streaming speech benchmark: Qwen3-Omni (thinker -> talker -> code2wav) through the mesh.

    python -m bench.speech --json bench-results/speech.json [--quick] [--checkpoint DIR]

Checkpoint: the tiny random Qwen3-Omni of engine.models.qwen3_omni.tiny, built in a temp dir unless
--checkpoint is given. Every process (the four services, this one: conductor, client,
in-process runner, transformers) runs torch with one thread. Requests: chat prompts
(4 texts in turn), greedy, at most --text-tokens text tokens (32: ~10 s of speech is
~30 words) and exactly --frames codec frames (128 = 10.24 s at 12.5 Hz: codec EOS
suppressed with min_frames = max_frames; code2wav trims ~555 samples per window, so a
request still yields >= 10 s of audio). Chunking: C = 25, L = 25 (vLLM-Omni's
codec_chunk_frames and left context), first window --first-chunk = 4 frames (its
initial_codec_chunk_frames; bench.speech_mesh).

Keys per concurrency (c1, c4, c16; c1 alone with --quick), ratios from this run:
- ttfa_ms_p50: time to first audio of the streaming model (split services), median;
  ttfa_ms_stage_pipeline_p50: the same for the stage-pipeline baseline on the same
  services (bench.stage_graph); ttfa_ratio = stage / streaming.
- rtf_p50: wall seconds per audio second of a request (split, streaming), median.
- audio_s_per_s (split), audio_s_per_s_colocated (talker + code2wav in one process):
  audio seconds of every request over the wall time of the waves; mesh_over_inprocess
  = audio_s_per_s / audio_s_per_s_inprocess (SpeechRunner, a wave's requests at once).
- hf_audio_s_per_s: transformers generate(return_audio=True), requests one after
  another (measured once, the same at every concurrency); audio_over_hf.
- viability: share of the chunks after a request's first that arrive before the audio
  delivered before them has finished playing (VoxServe; bench.speech_mesh.viability).
- ttfa_ms_inprocess_p50, ttfa_ms_inprocess_max: first audio of the in-process waves (ms
  from the wave's start): the compute a wave's first windows need, with no mesh, on one
  thread; cpu_s_per_audio_s_inprocess: that process's CPU seconds per audio second.
  `inprocess_ttfa_max_c16_over_p50_c1` is the policy target's ratio (burst c16
  p99 over c1 p50) for that compute alone, a reference for the mesh's: the mesh may do
  better by running the components side by side on more cores, and its c1 also holds
  the mesh's fixed costs per request.
Flat keys of a burst at c16 (bench.speech_cpu; with --quick at c1, and `burst_note` says so):
- burst_p99_over_inprocess_max_c16: the deadline-aware split mesh's first-audio p99 in a
  burst of 16 (`burst_ttfa_ms_p99`: the policy comparison's `deadline` c16 figure when it
  ran, else a burst of bench.speech_cpu's traced mesh; `burst_ttfa_ms_p99_from` names
  which) over c16's ttfa_ms_inprocess_max, the in-process wave's last first audio.
- cpu_s_per_audio_s_mesh_over_inprocess: CPU seconds per audio second of the processes on
  the request path (conductor, thinker, talker, codec; not the clients or the trace store),
  tracing on as `starmesh up` runs it, over c16's cpu_s_per_audio_s_inprocess (same
  prompts, text tokens, frames, concurrency). Per process under `cpu_burst`.
Targets: ttfa_ratio >= 12 at c1; audio_s_per_s >= 4 x hf at the highest concurrency;
mesh >= 0.9 x in-process; upper bounds: burst_p99_over_inprocess_max_c16 <= 1.15,
cpu_s_per_audio_s_mesh_over_inprocess <= 1.5 (`op` in each target). Speed is reported,
never asserted in tests.

Then the scheduling-policy comparison (bench.speech_policies: FCFS vs deadline-aware, same
requests, burst and Poisson arrivals at --policy-concurrency) under the keys `fcfs`,
`deadline`, `fcfs_poisson`, `deadline_poisson` and its targets under `policy_targets`
(--no-policies skips it). The keys above are the default (deadline-aware) policy's.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import tempfile

from bench.output import write_json
from bench.speech_mesh import CHUNK, FIRST, LEFT

PROMPTS = ("Hello there", "Tell me a story", "abc", "sing a song")


def checkpoint(args, name: str = "starmesh-bench-omni", marker: str = "config.json") -> str:
    """--checkpoint, or the tiny one cached under the temp dir as `name` (built unless `marker` is there)."""
    from engine.models.qwen3_omni.tiny import make_tiny_omni

    if args.checkpoint:
        return args.checkpoint
    path = os.path.join(tempfile.gettempdir(), name)
    if not os.path.exists(os.path.join(path, marker)):
        make_tiny_omni(path)
    return path


def request_params(args) -> dict:
    """Every measured request's: --text-tokens at most, exactly --frames frames (codec EOS suppressed)."""
    return {"max_new_tokens": args.text_tokens, "max_frames": args.frames + 1, "min_frames": args.frames + 1}


def points(results: dict) -> list[str]:
    """The per-concurrency keys (c1, c4, ...) of `results`, among its flat ones."""
    return [k for k in results if re.fullmatch(r"c\d+", k)]


def rounds(concurrency: int, args) -> int:
    """Waves per concurrency: at least --min-requests requests (medians of a few at c=1)."""
    return max(1, math.ceil(args.min_requests / concurrency))


def measure_mesh(ckpt: str, prompts: list, args) -> dict:
    from bench.speech_mesh import SpeechMesh, run_phase

    params = request_params(args)
    out = {}
    with SpeechMesh(ckpt, threads=1, first_chunk=args.first_chunk) as mesh:
        warm = {**params, "max_frames": 9, "min_frames": 9}
        for model in ("omni", "omni-colo", "omni-stage"):
            asyncio.run(run_phase(mesh.address, model, prompts, warm, 2, 1, 8))
        for c in args.concurrency:
            phases = {model: asyncio.run(run_phase(mesh.address, model, prompts, params, c, rounds(c, args),
                                                   args.frames))
                      for model in ("omni", "omni-stage", "omni-colo")}
            split = phases["omni"]
            out[c] = {"ttfa_ms_p50": split.ttfa_ms_p50, "ttfa_ms_stage_pipeline_p50": phases["omni-stage"].ttfa_ms_p50,
                      "rtf_p50": split.rtf_p50, "audio_s_per_s": split.audio_s_per_s,
                      "audio_s_per_s_colocated": phases["omni-colo"].audio_s_per_s, "viability": split.viability,
                      "min_audio_s": min(s.audio_s for p in phases.values() for s in p.summaries)}
            r = out[c]
            print(f"mesh c={c:2d}: ttfa {r['ttfa_ms_p50']:.1f} ms (stage {r['ttfa_ms_stage_pipeline_p50']:.1f}), "
                  f"{r['audio_s_per_s']:.2f} audio s/s (co-located {r['audio_s_per_s_colocated']:.2f})", flush=True)
    left = mesh.leftover_segments()
    if left:  # every service unlinks its arena on SIGTERM: a leftover is a bug to report
        print(f"WARNING: service segments left in /dev/shm: {left}", flush=True)
    return out


def measure(args) -> tuple[dict, dict]:
    """The c<N> points, and bench.speech_cpu's burst (at c16, or the highest concurrency run)."""
    import torch

    from bench import speech_cpu
    from bench.speech_baselines import hf_audio_s_per_s, inprocess_speech
    from engine.models.qwen3_omni.tiny import chat_prompt

    torch.set_num_threads(1)
    ckpt = checkpoint(args)
    prompts = [chat_prompt(p) for p in PROMPTS]
    hf = hf_audio_s_per_s(ckpt, prompts, args.text_tokens, args.frames, args.hf_requests)
    print(f"transformers: {hf:.2f} audio s/s", flush=True)
    inproc = {c: inprocess_speech(ckpt, prompts, args.text_tokens, args.frames, c, rounds(c, args), args.first_chunk)
              for c in args.concurrency}
    print("in-process: " + ", ".join(f"c={c} {v['audio_s_per_s']:.2f} audio s/s, first audio {v['ttfa_ms_p50']:.1f}"
                                     f" ms (max {v['ttfa_ms_max']:.1f})" for c, v in inproc.items()), flush=True)
    mesh = measure_mesh(ckpt, prompts, args)
    top = 16 if 16 in args.concurrency else max(args.concurrency)  # --quick: c1
    burst = speech_cpu.measure(ckpt, prompts, request_params(args), top, args.burst_rounds)
    results = {}
    for c in args.concurrency:
        r = {**mesh[c], "audio_s_per_s_inprocess": inproc[c]["audio_s_per_s"], "hf_audio_s_per_s": hf,
             "ttfa_ms_inprocess_p50": inproc[c]["ttfa_ms_p50"], "ttfa_ms_inprocess_max": inproc[c]["ttfa_ms_max"],
             "cpu_s_per_audio_s_inprocess": inproc[c]["cpu_s_per_audio_s"]}
        r["ttfa_ratio"] = r["ttfa_ms_stage_pipeline_p50"] / r["ttfa_ms_p50"]
        r["mesh_over_inprocess"] = r["audio_s_per_s"] / r["audio_s_per_s_inprocess"]
        r["colocated_over_inprocess"] = r["audio_s_per_s_colocated"] / r["audio_s_per_s_inprocess"]
        r["audio_over_hf"] = r["audio_s_per_s"] / hf
        results[f"c{c}"] = r
    return results, burst


# flat keys whose target is an upper bound
UPPER_BOUNDS = {"burst_p99_over_inprocess_max_c16": 1.15, "cpu_s_per_audio_s_mesh_over_inprocess": 1.5}


def targets(results: dict, concurrency: list[int]) -> dict:
    """{name: {value, op, target, met}}: op ">=" a lower bound, "<=" an upper one."""
    top = f"c{max(concurrency)}"
    out = {}
    if "c1" in results:
        out["ttfa_ratio_c1"] = (results["c1"]["ttfa_ratio"], ">=", 12.0)
    out[f"audio_over_hf_{top}"] = (results[top]["audio_over_hf"], ">=", 4.0)
    for key in points(results):
        out[f"mesh_over_inprocess_{key}"] = (results[key]["mesh_over_inprocess"], ">=", 0.9)
    for key, goal in UPPER_BOUNDS.items():
        if key in results:
            out[key] = (results[key], "<=", goal)
    return {k: {"value": v, "op": op, "target": t, "met": v >= t if op == ">=" else v <= t}
            for k, (v, op, t) in out.items()}


ROWS = (("ttfa_ms_p50", "ms"), ("ttfa_ms_stage_pipeline_p50", "ms"), ("ttfa_ratio", "x"),
        ("ttfa_ms_inprocess_p50", "ms"), ("ttfa_ms_inprocess_max", "ms"), ("rtf_p50", ""),
        ("audio_s_per_s", "audio s/s"), ("audio_s_per_s_colocated", "audio s/s"),
        ("audio_s_per_s_inprocess", "audio s/s"), ("hf_audio_s_per_s", "audio s/s"),
        ("cpu_s_per_audio_s_inprocess", "CPU s/audio s"),
        ("mesh_over_inprocess", "x"), ("audio_over_hf", "x"), ("viability", "share"), ("min_audio_s", "s"))


def report(results: dict, goals: dict) -> None:
    from bench import speech_cpu, speech_policies

    cols = points(results)
    print("\n" + f"{'':30s}" + "".join(f"{c:>12s}" for c in cols))
    for key, unit in ROWS:
        print(f"{key:30s}" + "".join(f"{results[c][key]:12.3f}" for c in cols) + f"  {unit}")
    if "inprocess_ttfa_max_c16_over_p50_c1" in results:
        print(f"in-process first audio: c16 max / c1 p50 = {results['inprocess_ttfa_max_c16_over_p50_c1']:.2f} "
              "(compute alone, no mesh)")
    speech_cpu.report(results)
    print()
    for name, g in goals.items():
        print(f"target {name:38s} {g['value']:8.2f} {g['op']} {g['target']:<5} {'met' if g['met'] else 'NOT met'}")
    if "policy_targets" in results:
        speech_policies.report(results["policy_targets"])


def policies(args, results: dict) -> None:
    """The FCFS vs deadline-aware comparison on the same requests, into `results`: bench.speech_policies
    run with this run's sizes, through its own options and run() (its `targets` as `policy_targets`)."""
    from bench import speech_policies

    argv = ["--frames", str(args.frames), "--text-tokens", str(args.text_tokens), "--rounds", str(args.policy_rounds),
            "--concurrency", *map(str, args.policy_concurrency)]
    argv += ["--checkpoint", args.checkpoint] if args.checkpoint else []
    argv += ["--quick"] if args.quick else []  # its quick sizes are this one's (main): its quick branch runs too
    got = speech_policies.run(speech_policies.parser().parse_args(argv))
    results["policy_targets"] = got.pop("targets")
    results.update(got)


def main(argv=None) -> None:
    from bench import speech_cpu

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--checkpoint", metavar="DIR", help="a Qwen3-Omni checkpoint (default: the tiny one)")
    p.add_argument("--quick", action="store_true", help="smoke run: concurrency 1, 8 frames, 4 text tokens, one "
                                                        "request per point (figures not to read)")
    p.add_argument("--frames", type=int, default=128, help="codec frames per request (12.5 per second)")
    p.add_argument("--text-tokens", type=int, default=32,
                   help="text tokens per request at most (~10 s of speech is ~30 words)")
    p.add_argument("--first-chunk", type=int, default=FIRST, help="frames in the first code2wav window")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--min-requests", type=int, default=4, help="requests per point at least (waves of c)")
    p.add_argument("--hf-requests", type=int, default=3)
    p.add_argument("--burst-rounds", type=int, default=2, help="bursts of the traced CPU mesh (bench.speech_cpu)")
    p.add_argument("--no-policies", action="store_true", help="skip the FCFS vs deadline-aware comparison")
    p.add_argument("--policy-concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    p.add_argument("--policy-rounds", type=int, default=2)
    args = p.parse_args(argv)
    if args.quick:
        args.frames, args.text_tokens, args.concurrency, args.min_requests, args.hf_requests = 8, 4, [1], 1, 1
        args.policy_concurrency, args.policy_rounds, args.burst_rounds = [1], 1, 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results, burst = measure(args)
    if "c1" in results and "c16" in results:
        results["inprocess_ttfa_max_c16_over_p50_c1"] = (results["c16"]["ttfa_ms_inprocess_max"]
                                                         / results["c1"]["ttfa_ms_inprocess_p50"])
    if not args.no_policies:
        policies(args, results)
    results.update(speech_cpu.headline(results, burst))  # after the policies: their deadline burst when they ran
    results["targets"] = targets(results, args.concurrency)
    report(results, results["targets"])
    results["config"] = {k: v for k, v in vars(args).items() if k != "json"}
    results["config"].update(chunk_size=CHUNK, left_context=LEFT, torch_threads=1)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
