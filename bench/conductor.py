"""Conductor benchmark: hop latency, conductor CPU per item, mesh vs in-process, speculation.

    python -m bench.conductor --json bench-results/conductor.json [--quick]

Three toy services (bench.conductor_toys) run as real processes on loopback; the
conductor (`ConductorService`) runs in this process; the client that drives
`Conductor.Generate` is one more process (bench.conductor_client), and so is the
trace store every process exports its spans to (bench.trace_store_proc), so this
process's CPU time (time.process_time) is the conductor's.

Streaming edges are routed (each producer's runtime pushes to its consumer replica, the
conductor hears lifecycle events and the client's items); each figure is the median over
--rounds. To compare with another commit, run both alternately: `python -m bench.ab
--base REV -- bench.conductor` (medians of the paired ratios).

Pipeline: `src` (a loop inside service A, one item per engine step) ~FixedChunk(1)~>
`mid` (B, per item) ~FixedChunk(1)~> `sink` (C, per item) -> the client. An *item* is
one src emission carried end to end: two streaming hops and one client event.
- hop_us_c1 / hop_us_c16: the median, over requests and both streaming edges, of the
  p50 of each aggregated `edge` span (production of an item -> dispatch of its
  consumer; emitted by the consumer's runtime on a routed edge, by the conductor on
  the conductor on edges it carries itself), at concurrency 1 and 16, with src paced (`--interval-ms` per engine
  step) so that a hop is measured, not the queue behind a burst: the default 30 ms
  offers 16 / 0.03 = 533 items/s at c=16, below the conductor's saturation here
  (~750 items/s); at 2 ms the c=16 figure is queueing (~40 ms), not a hop.
- consumer_wait_us_c1 / consumer_wait_us_c16: of those hops, the part in the consumer's
  runtime (the span's starmesh.consumer_wait_us.p50: its message read -> dispatch), same
  medians.
- grpc_echo_paced_us: a bare unary health Check to service B, one per `--interval-ms`
  (the pacing of hop_us_c1: between items every process goes idle, and on a small VM an
  idle process wakes slower than a busy one); hop_over_echo = hop_us_c1 / it.
  grpc_echo_us: the same Check back to back (hot processes); hop_over_echo_hot = hop_us_c1
  / it, the ratio of a paced hop to a hot round trip.
- conductor_cpu_us_per_item and conductor_saturation_items_per_s: unpaced src; the
  concurrency sweep point with the most items/s; its conductor CPU (process time /
  wall, `conductor_cpu_util`, 1.0 = one core) says how close to saturation it was
  (each sweep point also records the services' and the client's CPU: on a small
  machine they share the cores, and the conductor may not reach a whole one);
  conductor_items_per_core_s = 1e6 / conductor_cpu_us_per_item is the rate one
  fully busy core would route at that cost.
- conductor_cpu_us_per_request and conductor_cpu_us_per_extra_item (bench.conductor_request_cost):
  that CPU split into each request's fixed cost and each item's, from one more point at
  the saturation concurrency with 4x the items per request.
- mesh_items_per_s (sweep point at `--concurrency`) vs inprocess_items_per_s (the same
  graph and toys in this process through `inprocess_executor`, same concurrency, no
  client wire: its items are Python objects handed over in this process).
  mesh_cpu_us_per_item: the CPU of the conductor and the three services at that point,
  summed, per item; inprocess_cpu_us_per_item: this process's, per item, in-process.
- frontdoor_inprocess_items_per_s (bench.conductor_inprocess): the in-process deployment
  behind the same Conductor gRPC front door, read by the same client process at the same
  concurrency; mesh_over_frontdoor_inprocess = mesh_items_per_s / it compares only what
  the mesh adds (its processes and hops), not the client wire as well;
  frontdoor_inprocess_cpu_us_per_item is that process's CPU per item.
- time_to_unavailable_ms: a request whose sink runs alone on service K; K is killed at
  its first item; the time until the client sees UNAVAILABLE.
- grpc_stream_floor_us_per_msg (bench.grpc_floor): the CPU a bare grpc.aio server stream
  spends per message on this machine; conductor_cpu_over_floor = conductor CPU per item
  / it (each item reaches the client as one message, so 1.0 is the floor).
  items_per_client_message: at that sweep point, the items per message the clients read
  (the conductor sends a request's outputs that arrived together as one message: the
  more upstream batches, the fewer messages per item, so its CPU per item falls);
  conductor_cpu_us_per_client_message = conductor_cpu_us_per_item * it.

Speculation (bench.conductor_spec): DynamicLoop(step on A -> check on B), the conductor
driving it one iteration at a time; `step` sleeps `--step-ms` (device compute), `check`
spins the CPU for `--check-ms` (host work) and decides the stop. With speculation the
conductor dispatches step(k+1) as soon as step(k)'s output arrives, beside check(k),
so check(k) is the work that speculation overlaps. Formula (9) with, measured in this
run on a bare Run stream (open -> done, gRPC hop included):
    g = one `step` run on A, c = one `check` run on B, N = iterations per request;
    T_serial = N (c + g) (speculation off), T_pipe = c + g + (N - 1) max(c, g) (on);
the prediction is T_serial / T_pipe, printed beside the measured off / on ratio.

The client closes each call after its N items (the requests also end by themselves).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import time

from bench.conductor_client import Client
from bench.conductor_inprocess import frontdoor_inprocess, inprocess_items_per_s
from bench.conductor_request_cost import LONG, LONG_MODEL, request_cost
from bench.output import cpu_ticks, print_table, steal_share, write_json
from core import event_loop

STREAM_EDGES = ("src.x -> mid.x", "mid.y -> sink.y")  # the per-item hops (not input.n -> src.n)
FACTORIES = {"a": "bench.conductor_toys:make_a", "b": "bench.conductor_toys:make_b", "c": "bench.conductor_toys:make_c",
             "k": "bench.conductor_toys:make_c"}  # k: the sink killed for time_to_unavailable_ms


MODELS = {"": "pipe"}  # key prefix -> model


def start_conductor(services: dict, items: int, trace_store: str):
    from conductor.model import ServedModel
    from conductor.placement import Placement
    from conductor.service import ConductorService
    from runtime.background import BackgroundServer
    from runtime.telemetry import TRACE_STORE_ENV, Telemetry

    from bench.conductor_toys import PIPELINE_INNER_LOOPS, pipeline_graph

    telemetry = Telemetry("conductor", environ={TRACE_STORE_ENV: trace_store})
    placement = Placement.from_dict({"services": {k: {"replicas": [s.address]} for k, s in services.items()},
                                     "placement": {"src": "a", "mid": "b", "sink": "c"}})
    models = [ServedModel(name, pipeline_graph(items), placement, PIPELINE_INNER_LOOPS) for name in MODELS.values()]
    kill = Placement.from_dict({"services": {k: {"replicas": [s.address]} for k, s in services.items()},
                                "placement": {"src": "a", "mid": "b", "sink": "k"}})
    models.append(ServedModel("pipe-kill", pipeline_graph(100000), kill, PIPELINE_INNER_LOOPS))
    models.append(ServedModel(LONG_MODEL, pipeline_graph(LONG * items), placement, PIPELINE_INNER_LOOPS))
    server = BackgroundServer(ConductorService(models, telemetry), telemetry=telemetry)
    server.start()
    return server


def hop_us(store, prefix: str, num_requests: int) -> tuple[float, dict, float]:
    """Median p50 of the aggregated streaming-edge spans of requests `prefix-*` (emitted
    by the consumers' runtimes on routed edges, by the conductor otherwise); per edge too;
    and the median p50 of their consumer share (arrival -> dispatch; 0 where not recorded)."""
    by_edge: dict[str, list[float]] = {}
    waits = []
    for i in range(num_requests):
        for span in _edge_spans(store, f"{prefix}-{i}"):
            by_edge.setdefault(span["name"][5:], []).append(span["attributes"]["starmesh.latency_us.p50"])
            waits += [span["attributes"].get("starmesh.consumer_wait_us.p50", 0.0)]
    every = [v for values in by_edge.values() for v in values]
    if not every:
        raise RuntimeError(f"no edge spans for {prefix}")
    per_edge = {edge: statistics.median(v) for edge, v in by_edge.items()}
    return statistics.median(every), per_edge, statistics.median(waits)


def _edge_spans(store, request_id: str, timeout_s: float = 20.0) -> list[dict]:
    """The request's streaming-edge spans, once both have reached the store (batched export)."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = [s for s in store.spans(request_id) if s["name"][5:] in STREAM_EDGES]
        if len(spans) >= len(STREAM_EDGES) or time.monotonic() > deadline:
            return spans
        time.sleep(0.2)


def hop_phases(client: Client, store, args, model: str, tag: str) -> dict:
    paced = {"interval_s": args.interval_ms / 1e3}
    common = {"model": model, "items": args.items, "params": paced}
    client.run(prefix=f"warm{tag}", requests=4, concurrency=2, **common)
    results = {}
    for label, conc, requests in (("c1", 1, args.c1_requests), ("c16", 16, 2 * 16)):
        client.run(prefix=f"{label}{tag}", requests=requests, concurrency=conc, **common)
        results[f"hop_us_{label}"], results[f"hop_us_{label}_by_edge"], results[f"consumer_wait_us_{label}"] = hop_us(
            store, f"{label}{tag}", requests)
    return results


def saturation_phases(client: Client, args, model: str, tag: str) -> dict:
    sweep = []
    for conc in args.sweep:
        r = client.run(model=model, prefix=f"sat{conc}{tag}", requests=args.sweep_rounds * conc, concurrency=conc,
                       items=args.items, params={"interval_s": 0.0})
        sweep.append({"concurrency": conc, "items_per_s": r["items"] / r["wall_s"],
                      "cpu_us_per_item": r["conductor_cpu_s"] / r["items"] * 1e6,
                      "cpu_util": r["conductor_cpu_s"] / r["wall_s"],
                      "items_per_client_message": r["items"] / max(1, r["messages"]),
                      "other_cpu_util": {k: v / r["wall_s"] for k, v in r["other_cpu_s"].items()}})
    best = max(sweep, key=lambda p: p["items_per_s"])
    at_conc = next((p for p in sweep if p["concurrency"] == args.concurrency), best)
    split = request_cost(client, args.items, best, tag)  # after the sweep: its point is fresh
    # the CPU of every process on the items' path (conductor and services, not the client)
    path_util = at_conc["cpu_util"] + sum(v for k, v in at_conc["other_cpu_util"].items() if k != "client")
    return {"sweep": sweep, "conductor_saturation_items_per_s": best["items_per_s"],
            "conductor_items_per_core_s": 1e6 / best["cpu_us_per_item"],
            "conductor_cpu_us_per_item": best["cpu_us_per_item"], "conductor_cpu_util": best["cpu_util"],
            "saturation_concurrency": best["concurrency"], "mesh_items_per_s": at_conc["items_per_s"],
            "mesh_cpu_us_per_item": path_util / at_conc["items_per_s"] * 1e6,
            "items_per_client_message": best["items_per_client_message"], **split}


def rounds_of(client: Client, store, args) -> dict:
    """Every figure is the median over rounds."""
    per_round = []
    for r in range(args.rounds):
        got = {}
        for prefix, model in MODELS.items():
            tag = f"-{model}-r{r}"
            got[prefix] = {**hop_phases(client, store, args, model, tag), **saturation_phases(client, args, model, tag)}
            print(f"round {r} {model}: hop c1 {got[prefix]['hop_us_c1']:.0f} us, c16 {got[prefix]['hop_us_c16']:.0f}"
                  f" us, conductor {got[prefix]['conductor_cpu_us_per_item']:.1f} us/item, "
                  f"{got[prefix]['conductor_saturation_items_per_s']:.0f} items/s, "
                  f"{got[prefix]['items_per_client_message']:.2f} items per client message", flush=True)
        per_round.append(got)
    results = {}
    for prefix in MODELS:
        for key, value in per_round[0][prefix].items():
            if isinstance(value, (int, float)) and key != "saturation_concurrency":
                results[prefix + key] = statistics.median(g[prefix][key] for g in per_round)
            else:
                results[prefix + key] = value
    return results


def time_to_unavailable_ms(conductor_address: str, victim) -> float:
    """A routed consumer (sink on its own service) is killed mid-stream: how long until
    the request fails with UNAVAILABLE."""
    import grpc

    from bench.conductor_client import make_request
    from protos.starmesh.v1 import conductor_pb2_grpc

    async def main() -> float:
        async with grpc.aio.insecure_channel(conductor_address) as channel:
            call = conductor_pb2_grpc.ConductorStub(channel).Generate(
                make_request("pipe-kill", "kill-0", {"interval_s": 0.002}))
            killed = None
            try:
                async for _ in call:
                    if killed is None:
                        victim.kill()
                        killed = time.perf_counter()
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                return (time.perf_counter() - killed) * 1e3
            raise RuntimeError("the request finished although its consumer died")

    return asyncio.run(main())


def run_mesh(services: dict, store, args) -> dict:
    from bench.transport import grpc_echo_us

    from runtime.heap import settle_heap

    server = start_conductor(services, args.items, store.otlp)
    settle_heap()  # as a conductor process does once serving (runtime.server.serve)
    client = None
    try:
        client = Client(server.address, {f"svc_{k}": s.pid for k, s in services.items() if k != "k"})
        results = rounds_of(client, store, args)
        results["grpc_echo_us"] = asyncio.run(grpc_echo_us(services["b"].address, 200))
        results["grpc_echo_paced_us"] = asyncio.run(grpc_echo_us(services["b"].address, 60,
                                                                 interval_s=args.interval_ms / 1e3))
        results["time_to_unavailable_ms"] = time_to_unavailable_ms(server.address, services["k"])
    finally:
        from transport.segment import sweep_stale_segments

        sweep_stale_segments()  # the killed sink's arena: no restart of it will sweep it
        if client is not None:
            client.close()
        server.stop()
    return results


def start_services(names=tuple(FACTORIES), trace_store: str = "", args=()) -> dict:
    """The toy services `names` as processes, SERVING; `args`: more `starmesh serve` flags."""
    from runtime.process import ServiceProcess
    from runtime.telemetry import TRACE_STORE_ENV

    env = {TRACE_STORE_ENV: trace_store} if trace_store else {}
    procs = {k: ServiceProcess(FACTORIES[k], ["--host-id", "bench-host", *args], env=env, name=f"bench-{k}")
             for k in names}
    try:
        for proc in procs.values():  # in parallel: each child imports torch on its own
            proc.launch()
        for proc in procs.values():
            proc.wait_serving()
    except BaseException:
        for proc in procs.values():
            proc.stop()
        raise
    return procs


def report(results: dict) -> None:
    rows = [
        ("hop p50, concurrency 1", "hop_us_c1", "us"),
        ("hop p50, concurrency 16", "hop_us_c16", "us"),
        ("of it in the consumer, c1", "consumer_wait_us_c1", "us (arrival -> dispatch, p50)"),
        ("of it in the consumer, c16", "consumer_wait_us_c16", "us"),
        ("bare unary echo, paced like hop c1", "grpc_echo_paced_us", "us"),
        ("hop / echo", "hop_over_echo", "x (target <= 1.2)"),
        ("bare unary echo, back to back", "grpc_echo_us", "us"),
        ("hop / back-to-back echo", "hop_over_echo_hot", "x"),
        ("hop c16 / c1", "hop_c16_over_c1", "x (target <= 1.3)"),
        ("conductor CPU per item", "conductor_cpu_us_per_item", f"us (at c={results['saturation_concurrency']}, "
                                                                "target <= 30)"),
        ("conductor CPU there", "conductor_cpu_util", "cores"),
        ("conductor saturation", "conductor_saturation_items_per_s", "items/s"),
        ("one busy core would route", "conductor_items_per_core_s", "items/s (1e6 / CPU us per item)"),
        ("bare grpc.aio stream, CPU per message", "grpc_stream_floor_us_per_msg", "us (bench.grpc_floor)"),
        ("conductor CPU per item / that", "conductor_cpu_over_floor", "x"),
        ("items per client message there", "items_per_client_message", ""),
        ("conductor CPU per client message", "conductor_cpu_us_per_client_message", "us"),
        ("  of it, per request", "conductor_cpu_us_per_request", f"us (fixed: {results['items_per_request']} items "
                                                                  "per request carry it)"),
        ("  of it, per extra item", "conductor_cpu_us_per_extra_item", "us"),
        ("mesh", "mesh_items_per_s", "items/s"),
        ("in-process", "inprocess_items_per_s", "items/s"),
        ("mesh / in-process", "mesh_over_inprocess", "x (target >= 0.9)"),
        ("mesh CPU per item", "mesh_cpu_us_per_item", "us (conductor and services, summed)"),
        ("in-process CPU per item", "inprocess_cpu_us_per_item", "us (no client wire)"),
        ("in-process behind the front door", "frontdoor_inprocess_items_per_s", "items/s (same client, gRPC)"),
        ("its CPU per item", "frontdoor_inprocess_cpu_us_per_item", "us"),
        ("mesh / that", "mesh_over_frontdoor_inprocess", "x"),
        ("killed consumer -> UNAVAILABLE", "time_to_unavailable_ms", "ms"),
        ("loop, speculation off", "spec_off_ms", f"ms (formula 9: {results['spec_predicted_serial_ms']:.1f})"),
        ("loop, speculation on", "spec_on_ms", f"ms (formula 9: {results['spec_predicted_pipe_ms']:.1f})"),
        ("g (step) / c (check)", "spec_g_ms", f"ms / {results['spec_c_ms']:.2f} ms"),
        ("spec speedup", "spec_speedup", f"x (formula 9: {results['spec_predicted_speedup']:.2f})"),
        ("wasted steps per request", "spec_wasted_per_request", ""),
        ("CPU stolen by other guests", "cpu_steal_share", "of the machine's time (high: noisy figures)"),
    ]
    print_table(rows, results)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m bench.conductor", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--items", type=int, default=64, help="items per pipeline request (src loop iterations)")
    p.add_argument("--interval-ms", type=float, default=30.0, help="src pacing for the hop latency phases")
    p.add_argument("--c1-requests", type=int, default=10, help="requests of the concurrency-1 hop phase")
    p.add_argument("--concurrency", type=int, default=16, help="concurrency of mesh vs in-process")
    p.add_argument("--sweep", type=lambda s: [int(x) for x in s.split(",")], default=[4, 16, 64],
                   help="concurrency levels searched for the conductor's saturation")
    p.add_argument("--sweep-rounds", type=int, default=3, help="requests per slot at each sweep level")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the mesh phases (figures: medians over them)")
    p.add_argument("--loop-iters", type=int, default=20, help="iterations per speculation-loop request")
    p.add_argument("--step-ms", type=float, default=4.0, help="step compute (sleep) per iteration")
    p.add_argument("--check-ms", type=float, default=3.0, help="check host work (CPU spin) per iteration")
    p.add_argument("--spec-requests", type=int, default=5, help="requests per speculation setting")
    p.add_argument("--floor-messages", type=int, default=4000, help="messages per call of bench.grpc_floor")
    p.add_argument("--quick", action="store_true", help="smoke run: every phase at its smallest (figures not to read)")
    args = p.parse_args(argv)
    if args.quick:
        args.items, args.c1_requests, args.concurrency, args.sweep, args.sweep_rounds = 4, 2, 4, [4], 1
        args.rounds, args.loop_iters, args.spec_requests, args.floor_messages = 1, 2, 1, 200
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Closing a Generate call mid-stream (see the docstring) makes the OTel aio server
    # interceptor log "Failed to detach context" with a traceback per call: noise here.
    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    import torch

    torch.set_num_threads(1)  # like every service process
    from bench.conductor_spec import run_spec
    from bench.grpc_floor import floor_us_per_message

    from bench.trace_store_proc import TraceStoreProcess

    t0, ticks0 = time.perf_counter(), cpu_ticks()
    store = TraceStoreProcess()
    services = start_services(trace_store=store.otlp)
    try:
        results = run_mesh(services, store, args)
        results.update(asyncio.run(run_spec(services["a"].address, services["b"].address, args.loop_iters,
                                            args.step_ms / 1e3, args.check_ms / 1e3, args.spec_requests)))
    finally:
        for svc in services.values():
            svc.stop()
        store.close()
    # on the loop a process hosting components runs (STARMESH_EVENT_LOOP applies to it as
    # to the mesh's processes), not the bench client's
    results["inprocess_items_per_s"], results["inprocess_cpu_us_per_item"] = event_loop.run(
        inprocess_items_per_s(args.items, args.concurrency, 3))
    results.update(frontdoor_inprocess(args))
    results.update(floor_us_per_message(args.floor_messages))
    results["conductor_cpu_over_floor"] = (results["conductor_cpu_us_per_item"]
                                           / results["grpc_stream_floor_us_per_msg"])
    for prefix in MODELS:
        results[f"{prefix}hop_over_echo"] = results[f"{prefix}hop_us_c1"] / results["grpc_echo_paced_us"]
        results[f"{prefix}hop_over_echo_hot"] = results[f"{prefix}hop_us_c1"] / results["grpc_echo_us"]
        results[f"{prefix}mesh_over_inprocess"] = results[f"{prefix}mesh_items_per_s"] / results["inprocess_items_per_s"]
        results[f"{prefix}mesh_over_frontdoor_inprocess"] = (results[f"{prefix}mesh_items_per_s"]
                                                            / results["frontdoor_inprocess_items_per_s"])
        results[f"{prefix}hop_c16_over_c1"] = results[f"{prefix}hop_us_c16"] / results[f"{prefix}hop_us_c1"]
        results[f"{prefix}conductor_cpu_us_per_client_message"] = (results[f"{prefix}conductor_cpu_us_per_item"]
                                                                 * results[f"{prefix}items_per_client_message"])
    results["items_per_request"] = args.items
    results["bench_wall_s"] = time.perf_counter() - t0
    results["cpu_steal_share"] = steal_share(ticks0, cpu_ticks())
    report(results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

