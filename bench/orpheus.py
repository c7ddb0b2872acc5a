"""Orpheus benchmark: the Llama LM (with its token -> code loop) and SNAC through the mesh.

    python -m bench.orpheus --json bench-results/orpheus.json [--quick] [--checkpoint DIR]

Checkpoint: a tiny Orpheus whose LM costs a few ms per decode step at one thread (hidden
16, 2 layers, the full 156,940-id vocabulary: its 10 MB output head and sampling over it
are most of a step, about 4 ms here; measured and written as lm_step_ms), built in a temp
dir unless --checkpoint is given; its LM always speaks in frame order. Every process runs
torch with one thread. Requests: Orpheus prompts, seeded sampling at Orpheus'
defaults, exactly --tokens audio tokens (280 = 40 frames; the stop id suppressed), so
37 windows of 2048 samples (3.16 s) each; clients ask for audio alone, as /v1/audio/speech
does (--all-outputs: the tokens and codes too, every one through the conductor).

Keys per concurrency (c1, c4, c16; c1 alone with --quick), ratios from this run:
- ttfa_ms_p50: time to first audio through the mesh, median; ttfa_ratio = the
  non-streaming baseline's (generate every token, then decode; in-process) / it.
- audio_s_per_s: audio seconds of every request over the wall time of the waves.
- hf_audio_s_per_s: transformers generate + SNAC decode, one request after another
  (measured once); audio_over_hf = audio_s_per_s / it.
- rtf_p50: wall seconds per audio second of a request, median.
- viability: share of requests whose audio never underruns once playing, on the
  client's clock (each chunk arrives before the audio before it has played out).
Targets: ttfa_ratio >= 5 at c1; audio_s_per_s >= 4 x hf at c16; viability 1.0 at c4.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

from bench.output import write_json

TEXTS = (("tara", "Hello there"), ("leo", "Tell me a story"), ("zoe", "abc"), ("mia", "sing a song"))
SERVICES = ("orpheus_lm", "codec")


def checkpoint(args) -> str:
    from engine.models.orpheus.tiny import TinyOrpheusSpec, make_tiny_orpheus

    if args.checkpoint:
        return args.checkpoint
    path = os.path.join(tempfile.gettempdir(), "starmesh-bench-orpheus-h16s32")
    if not os.path.exists(os.path.join(path, "snac", "model.safetensors")):
        # hidden 16: the 156,940-row output head (10 MB) and sampling over it are most of a step
        spec = TinyOrpheusSpec(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, margin=8.0, slip=0.0, snac_encoder_dim=8, snac_decoder_dim=32)
        make_tiny_orpheus(path, spec=spec)
    return path


def is_viable(chunk_times_s: list[float], chunk_samples: list[int], rate: int) -> bool:
    """Playback starts on the first chunk; True when no later chunk arrives after the audio before it ran out."""
    if not chunk_times_s:
        return False
    play_end = chunk_times_s[0] + chunk_samples[0] / rate
    for t, n in zip(chunk_times_s[1:], chunk_samples[1:]):
        if t > play_end:
            return False
        play_end += n / rate
    return True


async def wave(address: str, prompts: list[list[int]], params: dict, concurrency: int, offset: int,
               audio_only: bool = True):
    from client.speech import speak

    batch = [prompts[(offset + i) % len(prompts)] for i in range(concurrency)]
    return await asyncio.gather(*(speak(address, "orpheus", ids, {**params, "seed": offset + i}, timeout_s=600,
                                        audio_only=audio_only)
                                  for i, ids in enumerate(batch)))


def measure_mesh(ckpt: str, prompts: list[list[int]], params: dict, args) -> dict:
    from conductor.service import ConductorService
    from engine.models.orpheus import SAMPLE_RATE
    from pipelines.orpheus.model import orpheus_model, orpheus_placement
    from runtime.background import BackgroundServer
    from runtime.process import ServiceProcess

    flags = ["--checkpoint", ckpt, "--torch-threads", "1", "--log-level", "WARNING"]
    procs = [ServiceProcess(name, flags, name=f"bench-{name}", start_timeout_s=180) for name in SERVICES]
    conductor, out = None, {}
    try:
        for proc in procs:  # in parallel: each child imports torch on its own
            proc.launch()
        for proc in procs:
            proc.wait_serving()
        model = orpheus_model("orpheus", orpheus_placement([procs[0].address], [procs[1].address]))
        conductor = BackgroundServer(ConductorService([model]))
        conductor.start()
        asyncio.run(wave(conductor.address, prompts, {**params, "max_new_tokens": 40}, 2, 0))  # warm-up
        for c in args.concurrency:
            summaries, wall = [], 0.0
            for r in range(max(1, -(-args.min_requests // c))):
                t0 = time.perf_counter()
                summaries += asyncio.run(wave(conductor.address, prompts, params, c, r * c, not args.all_outputs))
                wall += time.perf_counter() - t0
            out[c] = {"ttfa_ms_p50": statistics.median(s.ttfa_ms for s in summaries),
                      "rtf_p50": statistics.median(s.rtf for s in summaries),
                      "audio_s_per_s": sum(s.audio_s for s in summaries) / wall,
                      "viability": sum(is_viable(s.chunk_times_s, [int(x.numel()) for x in s.chunks], SAMPLE_RATE)
                                       for s in summaries) / len(summaries),
                      "min_audio_s": min(s.audio_s for s in summaries), "num_requests": len(summaries)}
            print(f"mesh c={c:2d}: ttfa {out[c]['ttfa_ms_p50']:.1f} ms, {out[c]['audio_s_per_s']:.2f} audio s/s, "
                  f"viability {out[c]['viability']:.2f}", flush=True)
    finally:
        if conductor is not None:
            conductor.stop()
        for proc in procs:
            proc.stop()
    return out


def measure(args) -> dict:
    import torch

    from bench.orpheus_baselines import hf_audio_s_per_s, lm_step_ms, nonstreaming_ttfa_ms
    from engine.models.orpheus import END_OF_SPEECH
    from engine.models.orpheus.prompt import speech_prompt_ids
    from pipelines.orpheus.params import RECOMMENDED

    torch.set_num_threads(1)
    ckpt = checkpoint(args)
    prompts = [speech_prompt_ids(ckpt, text, voice) for voice, text in TEXTS]
    params = {**RECOMMENDED, "max_new_tokens": args.tokens, "suppress_token_ids": [END_OF_SPEECH]}
    hf = hf_audio_s_per_s(ckpt, prompts, args.tokens, args.hf_requests)
    base_ttfa = nonstreaming_ttfa_ms(ckpt, prompts, args.tokens, args.hf_requests)
    step_ms = lm_step_ms(ckpt, prompts[0])
    print(f"transformers: {hf:.2f} audio s/s; non-streaming ttfa {base_ttfa:.1f} ms; "
          f"LM decode step {step_ms:.2f} ms", flush=True)
    mesh = measure_mesh(ckpt, prompts, params, args)
    results = {}
    for c in args.concurrency:
        r = {**mesh[c], "hf_audio_s_per_s": hf, "ttfa_ms_nonstreaming_p50": base_ttfa, "lm_step_ms": step_ms}
        r["ttfa_ratio"] = base_ttfa / r["ttfa_ms_p50"]
        r["audio_over_hf"] = r["audio_s_per_s"] / hf
        results[f"c{c}"] = r
    return results


def targets(results: dict) -> dict:
    goals = {"ttfa_ratio_c1": ("c1", "ttfa_ratio", 5.0), "audio_over_hf_c16": ("c16", "audio_over_hf", 4.0),
             "viability_c4": ("c4", "viability", 1.0)}
    return {name: {"value": results[c][key], "target": t, "met": results[c][key] >= t}
            for name, (c, key, t) in goals.items() if c in results}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--checkpoint", metavar="DIR", help="an Orpheus checkpoint with snac/ (default: the tiny one)")
    p.add_argument("--quick", action="store_true", help="smoke run: 35 tokens (two windows), concurrency 1, "
                                                        "one request each (figures not to read)")
    p.add_argument("--tokens", type=int, default=280, help="audio tokens per request (7 per frame)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--min-requests", type=int, default=4, help="requests per point at least (waves of c)")
    p.add_argument("--hf-requests", type=int, default=2)
    p.add_argument("--all-outputs", action="store_true",
                   help="clients take the tokens and codes too (default: audio alone, as /v1/audio/speech asks)")
    args = p.parse_args(argv)
    if args.quick:
        args.tokens, args.concurrency, args.min_requests, args.hf_requests = 35, [1], 1, 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = measure(args)
    results["targets"] = targets(results)
    for name, g in results["targets"].items():
        print(f"target {name:20s} {g['value']:8.2f} >= {g['target']:<5} {'met' if g['met'] else 'NOT met'}")
    results["config"] = {k: v for k, v in vars(args).items() if k != "json"} | {"torch_threads": 1}
    write_json(args.json, results)


if __name__ == "__main__":
    main()
