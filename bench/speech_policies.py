"""The scheduling-policy comparison of bench.speech: FCFS vs deadline-aware, same requests.

    python -m bench.speech_policies --json bench-results/speech_policies.json [--quick]

Two meshes of the split speech model (thinker | talker | codec) on the same checkpoint,
started side by side: `fcfs` (engines in arrival order, admission by max_in_flight only)
and `deadline` (engines by least slack, admission by measured capacity; `--no-capacity`:
by max_in_flight only, to see what scheduling alone does). Every point runs
its waves alternately on the two, the same prompts in the same order. Arrivals: `burst`
(a wave of c requests at once) and `poisson` (max(2c, 4) requests per round at a Poisson rate
chosen so that about c are in flight). Each client asks for text and audio, as a voice
client and the HTTP gateway's chat do (`--outputs all`: every output, the codec codes too,
which the conductor then forwards frame by frame). Both meshes run their services at the
CPU priorities of the shipped local deployment (`--equal-priority`: all the same). Keys per point (c1, c4, c16, c32):
  ttfa_ms_p50, ttfa_ms_p99   at the client, from send (admission wait included)
  viability                  share of requests that never underrun once playing (client clock)
  underrun_s_total           playback stalls, all requests
  audio_s_per_s              audio of every request over the phase's wall time
  refused                    requests refused with RESOURCE_EXHAUSTED
  cpu_s_per_audio_s          CPU seconds per second of audio made, per process (thinker,
                             talker, codec, this process: the conductors, and the clients'
                             process, bench.speech_client) and in all: what the audio costs,
                             and where the capacity goes
Before measuring, each mesh serves one wave at every concurrency (warm-up: the
deadline mesh's admission learns the deployment's rate as it would in service).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from bench.output import write_json
from bench.speech_client import SpeechClient
from bench.speech_mesh import OUTPUTS, SpeechMesh, add_outputs_option

POLICIES = ("fcfs", "deadline")


def _admission(policy: str, capacity: bool = True):
    from conductor.admission import Admission, AdmissionConfig
    from conductor.capacity import CapacityConfig

    return Admission(default=AdmissionConfig(max_in_flight=64, max_waiting=128,
                                             capacity=CapacityConfig(enabled=capacity and policy == "deadline")))


def _phase(mesh: SpeechMesh, client: SpeechClient, prompts, params: dict, delays: list[float],
           modalities: tuple[str, ...] = OUTPUTS["voice"]) -> dict:
    cpu0 = _cpu_s(mesh, client)
    got = client.phase(mesh.address, prompts, params, delays, modalities)
    wall, cpu, results = got["wall_s"], _cpu_s(mesh, client), got["results"]
    done = [r for r in results if not r["refused"]]
    ttfa = sorted(r["ttfa_ms"] for r in done)
    audio_s = sum(r["audio_s"] for r in done)
    return {"ttfa_ms_p50": statistics.median(ttfa) if ttfa else None,
            "ttfa_ms_p99": ttfa[min(len(ttfa) - 1, int(0.99 * len(ttfa)))] if ttfa else None,
            "viability": sum(r["continuous"] for r in done) / len(done) if done else None,
            "underrun_s_total": sum(r["underrun_s"] for r in done),
            "audio_s_per_s": audio_s / wall,
            "refused": len(results) - len(done), "requests": len(results),
            "cpu_s_per_audio_s": _per_audio_s(cpu0, cpu, audio_s)}


def _cpu_s(mesh: SpeechMesh, client: SpeechClient) -> dict[str, float]:
    """CPU seconds so far of the mesh's services, of this process (the conductors: the
    clients run in their own) and of the clients' process."""
    from bench.output import proc_cpu_s

    cpu = mesh.cpu_s()
    cpu["conductor"] = cpu.pop("conductor+client")
    cpu["client"] = proc_cpu_s(client.pid)
    return cpu


def _per_audio_s(before: dict[str, float], after: dict[str, float], audio_s: float) -> dict[str, float]:
    spent = {name: after[name] - before[name] for name in after}
    spent["all"] = sum(spent.values())
    return {name: s / audio_s if audio_s else float("nan") for name, s in spent.items()}


def _delays(mode: str, c: int, n: int, audio_s: float, rng: random.Random) -> list[float]:
    if mode == "burst":
        return [0.0] * n
    rate = c / audio_s  # requests per second that keep about c streams of audio_s seconds in flight
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def _merge(phases: list[dict]) -> dict:
    keys = ("ttfa_ms_p50", "ttfa_ms_p99", "viability", "audio_s_per_s")
    out = {k: statistics.median([p[k] for p in phases if p[k] is not None] or [float("nan")]) for k in keys}
    out["underrun_s_total"] = sum(p["underrun_s_total"] for p in phases)
    out["refused"] = sum(p["refused"] for p in phases)
    out["cpu_s_per_audio_s"] = {name: statistics.median(p["cpu_s_per_audio_s"][name] for p in phases)
                                for name in phases[0]["cpu_s_per_audio_s"]}
    out["requests"] = sum(p["requests"] for p in phases)
    return out


def measure(ckpt: str, prompts, params: dict, concurrency: list[int], rounds: int, audio_s: float,
            modes: tuple[str, ...] = ("burst", "poisson"), capacity: bool = True,
            ttfa_target_s: float | None = None, outputs: str = "voice", nice: dict | None = None) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    meshes = {p: SpeechMesh(ckpt, split_only=True, admission=_admission(p, capacity), options=(f"schedule={p}",),
                            ttfa_target_s=ttfa_target_s, nice=nice)
              for p in POLICIES}
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda m: m.__enter__(), meshes.values()))
    client = None
    try:
        client = SpeechClient()
        warm_frames = min(30, params["max_frames"])  # no longer than the requests measured
        warm = {**params, "max_frames": warm_frames, "min_frames": warm_frames}
        for c in concurrency:
            for mesh in meshes.values():
                _phase(mesh, client, prompts, warm, [0.0] * c, OUTPUTS[outputs])
        results = {key: {} for key in ("fcfs", "deadline", "fcfs_poisson", "deadline_poisson")}
        for mode in modes:
            for c in concurrency:
                phases = {p: [] for p in POLICIES}
                for r in range(rounds):
                    delays = _delays(mode, c, c if mode == "burst" else max(2 * c, 4), audio_s, random.Random(r))
                    for p in (POLICIES if r % 2 == 0 else POLICIES[::-1]):  # alternate which goes first
                        phases[p].append(_phase(meshes[p], client, prompts, params, delays, OUTPUTS[outputs]))
                for p in POLICIES:
                    key = p if mode == "burst" else f"{p}_poisson"
                    results[key][f"c{c}"] = _merge(phases[p])
                    print(f"{key:18s} c={c:2d}: {_line(results[key][f'c{c}'])}", flush=True)
        rates = meshes["deadline"].admission._gate("omni").capacity.rates if capacity else {}
        results["deadline_capacity_rates"] = {f"c{n}": r for n, r in sorted(rates.items())}
        return results
    finally:
        if client is not None:
            client.close()
        for mesh in meshes.values():
            mesh.__exit__()


def _line(r: dict) -> str:
    return (f"ttfa p50 {r['ttfa_ms_p50']:.0f} ms p99 {r['ttfa_ms_p99']:.0f} ms, viability {r['viability']:.2f}, "
            f"underrun {r['underrun_s_total']:.2f} s, {r['audio_s_per_s']:.2f} audio s/s, refused {r['refused']}; "
            "CPU s per audio s: " + ", ".join(f"{k} {v:.3f}" for k, v in r["cpu_s_per_audio_s"].items()))


def targets(results: dict) -> dict:
    d, f = results.get("deadline", {}), results.get("fcfs", {})
    out = {}
    if "c16" in d and "c16" in f:
        out["viability_c16"] = (d["c16"]["viability"], ">=", 1.0)
        out["refused_c16"] = (d["c16"]["refused"], "<=", 0)
        out["audio_s_per_s_c16_over_fcfs"] = (d["c16"]["audio_s_per_s"] / f["c16"]["audio_s_per_s"], ">=", 0.95)
        if "c1" in d:
            out["ttfa_p99_c16_over_p50_c1"] = (d["c16"]["ttfa_ms_p99"] / d["c1"]["ttfa_ms_p50"], "<=", 3.0)
    return {k: {"value": v, "target": t, "met": v >= t if op == ">=" else v <= t} for k, (v, op, t) in out.items()}


def report(goals: dict) -> None:
    for name, g in goals.items():
        print(f"target {name:30s} {g['value']:8.2f} vs {g['target']:<5} {'met' if g['met'] else 'NOT met'}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.speech_policies", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--checkpoint", metavar="DIR")
    p.add_argument("--quick", action="store_true", help="smoke run: concurrency 1, 8 frames, one round")
    p.add_argument("--frames", type=int, default=128)
    p.add_argument("--text-tokens", type=int, default=32, help="text tokens per request at most")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    p.add_argument("--rounds", type=int, default=2, help="waves per point and policy")
    p.add_argument("--modes", nargs="+", choices=("burst", "poisson"), default=["burst", "poisson"])
    p.add_argument("--no-capacity", action="store_true",
                   help="the deadline mesh admits by max_in_flight only (scheduling alone)")
    p.add_argument("--ttfa-target-ms", type=float, default=None,
                   help="the model's ttfa_target_s, in ms (default: the model's own)")
    p.add_argument("--equal-priority", action="store_true",
                   help="every service at the same CPU priority (default: as the local deployment, "
                        "the thinker and talker yield to the stages after them)")
    add_outputs_option(p)
    return p


def run(args: argparse.Namespace) -> dict:
    """The comparison's keys and its `targets`, for parsed options (bench.speech runs its
    policy comparison through here too: one path, whichever command runs it)."""
    from bench.speech import PROMPTS, checkpoint
    from engine.models.qwen3_omni.tiny import chat_prompt

    if args.quick:
        args.frames, args.concurrency, args.rounds = 8, [1], 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    params = {"max_new_tokens": args.text_tokens, "max_frames": args.frames + 1, "min_frames": args.frames + 1}
    prompts = [chat_prompt(x) for x in PROMPTS]
    target_s = None if args.ttfa_target_ms is None else args.ttfa_target_ms / 1e3
    results = measure(checkpoint(args), prompts, params, args.concurrency, args.rounds, args.frames / 12.5,
                      tuple(args.modes), capacity=not args.no_capacity, ttfa_target_s=target_s, outputs=args.outputs,
                      nice={} if args.equal_priority else None)
    results["targets"] = targets(results)
    return results


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    results = run(args)
    report(results["targets"])
    results["config"] = vars(args)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
