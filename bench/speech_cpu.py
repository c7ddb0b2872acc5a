"""The burst keys of bench.speech: the request path's CPU per audio second with tracing on
as deployed, and a burst's last first audio, each against the in-process runner's.

    burst = measure(checkpoint, prompts, params, concurrency, rounds)
    results.update(headline(results, burst))        # results: bench.speech's, c<N> points

The mesh: bench.speech_mesh.SpeechMesh with split services (thinker | talker | codec) and
the deployed defaults: deadline-aware scheduling, admission by measured capacity, the
local deployment's CPU priorities. Tracing as `starmesh up` runs it: the services and the
conductor export their spans to a local trace store (bench.trace_store_proc, a process of
its own whose CPU is not counted); the services are given STARMESH_TRACE_STORE, the
conductor a Telemetry exporting there, which also traces its gRPC server as a deployed
conductor's does. Prometheus metrics stay off, as in every SpeechMesh. The clients run in
their own process (bench.speech_client), not counted; they ask for text and audio, as the
HTTP gateway's chat does. After one warm-up wave at the burst's concurrency (admission
learns the deployment's rate, as in bench.speech_policies): `rounds` bursts of
`concurrency` requests sent at once.

CPU of each burst, from its send to SETTLE_S after its last request ended (the services
export spans every 200 ms: sending the burst's spans is part of its cost):
- thinker, talker, codec: utime + stime of the service process (/proc/<pid>/stat);
- conductor: it runs in this process, on its own threads (its event loop, gRPC's, its span
  exporter's). Its figure is this process's CPU (time.process_time) less this thread's
  (time.thread_time), which only writes the client's command and waits on its pipe.
  Nothing else runs in this process meanwhile (bench.speech's in-process runner and its
  other mesh are done by then), so the rest is the conductor's.
The gateway, the trace store and the clients are not on the request path's count.
"""
from __future__ import annotations

import statistics
import time

SETTLE_S = 0.5  # > the services' span export period (200 ms): a burst's spans are sent inside its window


def _cpu_s(mesh) -> dict[str, float]:
    """CPU seconds so far: each service process's, and the conductor's (module docstring)."""
    from bench.output import proc_cpu_s

    cpu = {name: proc_cpu_s(proc.pid) for name, proc in mesh.procs.items()}
    cpu["conductor"] = time.process_time() - time.thread_time()
    return cpu


def _burst(mesh, client, prompts, params: dict, n: int, tag: str) -> dict:
    """n requests at once (ids tag-0...): their first-audio p99 (client clock, from send), audio and CPU."""
    from bench.speech_mesh import OUTPUTS

    before = _cpu_s(mesh)
    got = client.phase(mesh.address, prompts, params, [0.0] * n, OUTPUTS["voice"], tag)
    time.sleep(SETTLE_S)
    after = _cpu_s(mesh)
    done = [r for r in got["results"] if not r["refused"]]
    if len(done) != n:  # the comparison with the in-process runner needs every request served
        raise RuntimeError(f"cpu burst: {n - len(done)} of {n} requests refused")
    ttfa = sorted(r["ttfa_ms"] for r in done)
    return {"ttfa_ms_p99": ttfa[min(n - 1, int(0.99 * n))], "audio_s": sum(r["audio_s"] for r in done),
            "cpu_s": {name: after[name] - before[name] for name in after}}


def measure(checkpoint: str, prompts, params: dict, concurrency: int, rounds: int) -> dict:
    """{concurrency, rounds, ttfa_ms_p99 (median over the bursts), audio_s (all bursts),
    cpu_s_per_audio_s: per process and "all" (the bursts' CPU over their audio),
    spans_first_request: what the trace store holds of the first burst's first request
    (read once every process has stopped and flushed: > 0 shows tracing was on)}."""
    from bench.speech_client import SpeechClient
    from bench.speech_mesh import OUTPUTS, SpeechMesh
    from bench.trace_store_proc import TraceStoreProcess
    from runtime.telemetry import TRACE_STORE_ENV, Telemetry

    store = TraceStoreProcess()
    try:
        telemetry = Telemetry("conductor", environ={TRACE_STORE_ENV: store.otlp})
        with SpeechMesh(checkpoint, split_only=True, telemetry=telemetry, env={TRACE_STORE_ENV: store.otlp}) as mesh, \
                SpeechClient() as client:
            warm_frames = min(30, params["max_frames"])  # no longer than the requests measured
            warm = {**params, "max_frames": warm_frames, "min_frames": warm_frames}
            client.phase(mesh.address, prompts, warm, [0.0] * concurrency, OUTPUTS["voice"])
            bursts = [_burst(mesh, client, prompts, params, concurrency, f"cpu{r}") for r in range(rounds)]
        spans = len(store.spans("cpu0-0"))
    finally:
        store.close()
    audio_s = sum(b["audio_s"] for b in bursts)
    cpu = {name: sum(b["cpu_s"][name] for b in bursts) for name in bursts[0]["cpu_s"]}
    cpu["all"] = sum(cpu.values())
    return {"concurrency": concurrency, "rounds": rounds, "audio_s": audio_s,
            "ttfa_ms_p99": statistics.median(b["ttfa_ms_p99"] for b in bursts),
            "cpu_s_per_audio_s": {name: s / audio_s for name, s in cpu.items()}, "spans_first_request": spans}


def headline(results: dict, burst: dict) -> dict:
    """The two flat keys of bench.speech and what they divide. The burst's first-audio p99 is the policy
    comparison's (bench.speech_policies: `deadline`, burst arrivals, the same requests) when
    it ran at this concurrency, else this module's traced burst's. At a concurrency other
    than 16 (--quick) the keys keep their names and `burst_note` says so."""
    c = burst["concurrency"]
    point = results[f"c{c}"]
    policy = results.get("deadline", {}).get(f"c{c}", {}).get("ttfa_ms_p99")
    p99, source = (policy, f"deadline.c{c}.ttfa_ms_p99") if policy else (burst["ttfa_ms_p99"], "cpu_burst.ttfa_ms_p99")
    out = {"burst_p99_over_inprocess_max_c16": p99 / point["ttfa_ms_inprocess_max"],
           "cpu_s_per_audio_s_mesh_over_inprocess":
               burst["cpu_s_per_audio_s"]["all"] / point["cpu_s_per_audio_s_inprocess"],
           "burst_ttfa_ms_p99": p99, "burst_ttfa_ms_p99_from": source, "burst_concurrency": c, "cpu_burst": burst}
    if c != 16:
        out["burst_note"] = f"measured at c{c}, not c16 (the run's highest concurrency): not the target's figures"
    return out


def report(results: dict) -> None:
    c, burst = results["burst_concurrency"], results["cpu_burst"]
    inproc = results[f"c{c}"]
    print(f"\nburst c{c}: first audio p99 {results['burst_ttfa_ms_p99']:.0f} ms ({results['burst_ttfa_ms_p99_from']})"
          f" / in-process last first audio {inproc['ttfa_ms_inprocess_max']:.0f} ms"
          f" = {results['burst_p99_over_inprocess_max_c16']:.2f}")
    parts = ", ".join(f"{k} {v:.3f}" for k, v in burst["cpu_s_per_audio_s"].items())
    print(f"CPU s per audio s c{c} (traced): mesh {parts} / in-process {inproc['cpu_s_per_audio_s_inprocess']:.3f} = "
          f"{results['cpu_s_per_audio_s_mesh_over_inprocess']:.2f}")
    if "burst_note" in results:
        print(f"note: {results['burst_note']}")
