"""Where a speech burst's streams stall: per chunk index, on the client's clock.

    python -m bench.speech_stalls [--concurrency 16] [--rounds 3] [--schedule deadline] [--json PATH] [--quick]

The split speech mesh (bench.speech_mesh, admission by max_in_flight only) serves a warm-up
wave, then `--rounds` bursts of C requests at once, each client asking for text and audio
(`--outputs all`: the codes too). For each burst, with playback starting
when a stream's first chunk arrives and a late chunk stalling it until it arrives:
  stalls_ms[k]     the stalls before chunk k, over the burst's streams (k = 1: the second chunk)
  gap01_ms         each stream's arrival of chunk 1 minus chunk 0, against
  chunk_ms         the audio each chunk holds (chunk 0's length is the gap a stream can afford)
  ttfa_ms          first audio, from send
A burst starts every stream's chunk ramp at once: the chunk right after the first is
made while only the first plays, for every stream together.
"""
from __future__ import annotations

import argparse
import asyncio
import os

from bench.output import write_json

PARAMS = {"max_new_tokens": 32, "max_frames": 129, "min_frames": 129}
QUICK_PARAMS = {"max_new_tokens": 4, "max_frames": 9, "min_frames": 9}  # --quick: two chunks, one burst of 2


async def burst(address: str, prompts: list, n: int, params: dict, modalities: tuple[str, ...]) -> list:
    from client.speech import speak

    return await asyncio.gather(*(speak(address, "omni", prompts[i % len(prompts)], params, timeout_s=600,
                                        modalities=modalities)
                                  for i in range(n)))


def round_figures(summaries: list, sample_rate: int) -> dict:
    from bench.speech_mesh import stalls_s

    stalls: dict[int, list[float]] = {}
    for s in summaries:
        for k, stall in stalls_s(s).items():
            stalls.setdefault(k, []).append(stall * 1e3)
    return {"stalls_ms": {str(k): sorted(v) for k, v in sorted(stalls.items())},
            "gap01_ms": sorted((s.chunk_times_s[1] - s.chunk_times_s[0]) * 1e3 for s in summaries
                               if len(s.chunk_times_s) > 1),
            "chunk_ms": [int(c.numel()) / sample_rate * 1e3 for c in summaries[0].chunks],
            "ttfa_ms": sorted(s.ttfa_ms for s in summaries)}


def measure(checkpoint: str, prompts: list, concurrency: int, rounds: int, schedule: str,
            outputs: str = "voice", params: dict = PARAMS) -> dict:
    from bench.speech_mesh import OUTPUTS, SpeechMesh
    from bench.speech_policies import _admission
    from engine.models.qwen3_omni import SAMPLE_RATE

    out = {"concurrency": concurrency, "schedule": schedule, "rounds": []}
    with SpeechMesh(checkpoint, split_only=True, admission=_admission(schedule, False),
                    options=(f"schedule={schedule}",)) as mesh:
        warm = min(30, params["max_frames"])
        asyncio.run(burst(mesh.address, prompts, concurrency, {**params, "max_frames": warm, "min_frames": warm},
                          OUTPUTS[outputs]))
        for r in range(rounds):
            got = round_figures(asyncio.run(burst(mesh.address, prompts, concurrency, params, OUTPUTS[outputs])),
                                SAMPLE_RATE)
            out["rounds"].append(got)
            stalls = {k: [round(x) for x in v] for k, v in got["stalls_ms"].items()}
            print(f"round {r}: ttfa {got['ttfa_ms'][0]:.0f}..{got['ttfa_ms'][-1]:.0f} ms, chunk 0 holds "
                  f"{got['chunk_ms'][0]:.0f} ms, gap to chunk 1 {got['gap01_ms'][0]:.0f}..{got['gap01_ms'][-1]:.0f}"
                  f" ms; stalls by chunk (ms): {stalls}", flush=True)
    return out


def main(argv=None) -> int:
    from bench.speech import PROMPTS, checkpoint
    from bench.speech_mesh import add_outputs_option
    from engine.models.qwen3_omni.tiny import chat_prompt

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--schedule", choices=("deadline", "fcfs"), default="deadline")
    p.add_argument("--checkpoint", metavar="DIR")
    add_outputs_option(p)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--quick", action="store_true", help="smoke run: one burst of 2, QUICK_PARAMS (figures not to read)")
    args = p.parse_args(argv)
    params = PARAMS
    if args.quick:
        args.concurrency, args.rounds, params = 2, 1, QUICK_PARAMS
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = measure(checkpoint(args), [chat_prompt(x) for x in PROMPTS], args.concurrency, args.rounds,
                      args.schedule, args.outputs, params)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
