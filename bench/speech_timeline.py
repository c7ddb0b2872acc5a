"""Where a speech request's time to first audio goes, alone and in a burst, from its trace.

    python -m bench.speech_timeline [--concurrency C] [--json PATH] [--quick]

The split speech mesh (thinker | talker | codec, bench.speech_mesh; deadline scheduling)
exports every process's spans to a local trace store; clients ask for text and audio
(`--outputs all`: the codes too). One request alone (the baseline),
then a burst of C at once. For each request, in ms from its send (the spans' wall clock):
  admitted                     the conductor's request span starts (past admission)
  prefill_start, prefill_end   the thinker's prefill run
  talker_start                 the talker's loop run opens
  codes_ready                  the first code2wav chunk's first frame is produced (edge span start)
  codec_start, codec_end       that chunk's code2wav run (waiting for the codec: codec_start - codes_ready)
  ttfa                         first audio at the client
Per mark: the burst's median and max, and `*_over_alone` = burst max / the lone request's
value: which stage the burst's last first audio waits on. `cpu_window_alone` and
`cpu_window_burst` (bench.cpu_window): each process's CPU and run-queue wait from a wave's
send to its last first audio, i.e. whether the tail is work or waiting for a core. The
JSON also keeps each wave's send time (`alone_sent_unix_s`, `burst_sent_unix_s`, wall
clock) to line other logs of the run up with the marks.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time

from bench.cpu_window import CpuSampler
from bench.output import write_json

PARAMS = {"max_new_tokens": 32, "max_frames": 129, "min_frames": 129}
QUICK_PARAMS = {"max_new_tokens": 4, "max_frames": 9, "min_frames": 9}  # --quick: two chunks, a burst of 2
MARKS = ("admitted", "prefill_start", "prefill_end", "talker_start", "codes_ready", "codec_start", "codec_end", "ttfa")
CODES_EDGE = "edge talker.codes -> code2wav.codes"


def _first(spans: list[dict], name: str) -> dict | None:
    found = [s for s in spans if s["name"] == name]
    return min(found, key=lambda s: s["start_ns"]) if found else None


def marks(spans: list[dict], sent_s: float, ttfa_ms: float) -> dict | None:
    """The request's marks, None while one of its spans has not reached the store."""
    prefill, talker = _first(spans, "node prefill"), _first(spans, "node talker")
    codes, codec = _first(spans, CODES_EDGE), _first(spans, "node code2wav")
    request = _first(spans, "request")
    if None in (request, prefill, talker, codes, codec):
        return None

    def ms(ns: int) -> float:
        return ns / 1e6 - sent_s * 1e3

    return {"admitted": ms(request["start_ns"]), "prefill_start": ms(prefill["start_ns"]), "prefill_end": ms(prefill["end_ns"]),
            "talker_start": ms(talker["start_ns"]), "codes_ready": ms(codes["start_ns"]),
            "codec_start": ms(codec["start_ns"]), "codec_end": ms(codec["end_ns"]), "ttfa": ttfa_ms}


def wait_marks(store, request_id: str, sent_s: float, ttfa_ms: float, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:  # spans are exported in batches, after the runs end
        found = marks(store.spans(request_id), sent_s, ttfa_ms)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"the spans of {request_id} did not reach the trace store")
        time.sleep(0.2)


async def wave(address: str, prompts: list, tag: str, n: int, modalities: tuple[str, ...],
               shared: bool = False, params: dict = PARAMS) -> tuple[float, list]:
    """n requests at once, asking for `modalities` (bench.speech_mesh.OUTPUTS); shared: on
    one open channel (as a gateway holds one), else a channel per request (client.speech's
    default for an address)."""
    from client.connection import Connection
    from client.speech import speak

    async with Connection.from_env(address).aio_channel() if shared else contextlib.nullcontext(address) as to:
        if shared:
            await to.channel_ready()
        sent = time.time()
        got = await asyncio.gather(*(speak(to, "omni", prompts[i % len(prompts)], params, request_id=f"{tag}-{i}",
                                           modalities=modalities,
                                           timeout_s=600) for i in range(n)))
    return sent, got


def measure(checkpoint: str, prompts: list, concurrency: int, shared: bool = False,
            outputs: str = "voice", params: dict = PARAMS) -> dict:
    from bench.speech_mesh import OUTPUTS, SpeechMesh
    from bench.speech_policies import _admission
    from bench.trace_store_proc import TraceStoreProcess
    from runtime.telemetry import TRACE_STORE_ENV, Telemetry

    wanted = OUTPUTS[outputs]
    store = TraceStoreProcess()
    os.environ[TRACE_STORE_ENV] = store.otlp  # the service processes inherit it
    telemetry = Telemetry("conductor", environ={TRACE_STORE_ENV: store.otlp})
    try:
        with SpeechMesh(checkpoint, split_only=True, admission=_admission("deadline", False),
                        options=("schedule=deadline",), telemetry=telemetry) as mesh:
            asyncio.run(wave(mesh.address, prompts, "warm", concurrency, wanted, shared, params))
            pids = {**{name: proc.pid for name, proc in mesh.procs.items()}, "conductor+client": os.getpid()}
            with CpuSampler(pids) as sampler:
                alone_sent, alone = asyncio.run(wave(mesh.address, prompts, "alone", 1, wanted, shared, params))
                burst_sent, burst = asyncio.run(wave(mesh.address, prompts, "burst", concurrency, wanted, shared,
                                                     params))
            cpu = {"alone": sampler.window(alone_sent, alone_sent + alone[0].ttfa_ms / 1e3),
                   "burst": sampler.window(burst_sent, burst_sent + max(s.ttfa_ms for s in burst) / 1e3)}
        one = wait_marks(store, "alone-0", alone_sent, alone[0].ttfa_ms)
        many = [wait_marks(store, f"burst-{i}", burst_sent, s.ttfa_ms) for i, s in enumerate(burst)]
    finally:
        telemetry.shutdown()
        os.environ.pop(TRACE_STORE_ENV, None)
        store.close()
    # the waves' send times (wall clock, s): where other logs of the run (engine steps) line up with the marks
    out = {"concurrency": concurrency, "shared_channel": shared, "alone": one, "burst": many,
           "alone_sent_unix_s": alone_sent, "burst_sent_unix_s": burst_sent,
           "cpu_window_alone": cpu["alone"], "cpu_window_burst": cpu["burst"]}
    for mark in MARKS:
        values = [m[mark] for m in many]
        out[f"{mark}_ms_median"], out[f"{mark}_ms_max"] = statistics.median(values), max(values)
        out[f"{mark}_over_alone"] = max(values) / one[mark] if one[mark] > 0 else float("nan")
    return out


def main(argv=None) -> int:
    from bench.speech import PROMPTS, checkpoint
    from bench.speech_mesh import add_outputs_option
    from engine.models.qwen3_omni.tiny import chat_prompt

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--checkpoint", metavar="DIR")
    p.add_argument("--shared-channel", action="store_true", help="every request of a wave on one open channel")
    add_outputs_option(p)
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--quick", action="store_true", help="smoke run: a burst of 2, QUICK_PARAMS (figures not to read)")
    args = p.parse_args(argv)
    params = PARAMS
    if args.quick:
        args.concurrency, params = 2, QUICK_PARAMS
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = measure(checkpoint(args), [chat_prompt(x) for x in PROMPTS], args.concurrency, args.shared_channel,
                      args.outputs, params)
    print(f"{'ms from send':14s} {'alone':>8s} {'burst p50':>10s} {'burst max':>10s}")
    for mark in MARKS:
        print(f"{mark:14s} {results['alone'][mark]:8.0f} {results[f'{mark}_ms_median']:10.0f} "
              f"{results[f'{mark}_ms_max']:10.0f}")
    print_cpu(results)
    write_json(args.json, results)
    return 0


def print_cpu(results: dict) -> None:
    """Each process's CPU and run-queue wait from send to the wave's last first audio."""
    alone, burst = results["cpu_window_alone"], results["cpu_window_burst"]
    print(f"\n{'CPU ms / run-queue wait ms':26s} {'alone':>13s} {'burst':>13s}   (send -> last first audio)")
    for name in burst["processes"]:
        a, b = alone["processes"][name], burst["processes"][name]
        print(f"{name:26s} {a['cpu_ms']:6.0f} /{a['runq_wait_ms']:5.0f} {b['cpu_ms']:6.0f} /{b['runq_wait_ms']:5.0f}")
    cores = os.cpu_count() or 1
    for label, w in (("alone", alone), ("burst", burst)):
        total = sum(p["cpu_ms"] for p in w["processes"].values()) - w["sampler_cpu_ms"]
        print(f"{label}: {total:.0f} ms of CPU in {w['span_ms']:.0f} ms on {cores} cores "
              f"({total / (w['span_ms'] * cores):.0%} busy; the sampler's own {w['sampler_cpu_ms']:.0f} ms left out)")


if __name__ == "__main__":
    raise SystemExit(main())
