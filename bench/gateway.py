"""The HTTP gateway's cost over the gRPC API it translates, on the same requests.

    python -m bench.gateway --json bench-results/gateway.json [--rounds 20] [--frames 64] [--quick]

A deployment of Qwen3-Omni (thinker, talker, codec: one process each) with its conductor
and gateway, started as `starmesh up` starts them (cluster.launcher; tiny checkpoint).
Every request: "Hello there", greedy, 8 text tokens, exactly --frames codec frames,
audio only, PCM. The gRPC client is client.session (what the gateway itself calls); the
HTTP client is bench.http_client (the request in one write, the chunked body read as it
arrives), streaming POST /v1/audio/speech with response_format pcm and stream_format
audio; httpx (the openai SDK's client) is measured beside it. All run in this process,
alternating request by request.

Keys (flat):
- added_ttfa_ms_p50 / _p99: time to the first audio byte at the HTTP client minus the
  time to the first AudioChunk at the gRPC client, over paired rounds at concurrency 1;
  added_ttfa_ms_p50_httpx / _p99_httpx: the same with httpx as the HTTP client (its
  own cost included).
- gateway_cpu_us_per_chunk: the gateway process's CPU (every thread, schedstat) over
  its rounds, per audio chunk delivered (chunks per request counted at the gRPC
  client); per-request work (HTTP parsing, validation, the call) is included.
  gateway_cpu_us_per_request: the same per request.
- gateway_over_grpc_c16: audio seconds per second through the gateway over the same
  through gRPC, 16 streams at once; the median of paired waves.
- cancel_free_ms: an HTTP client that leaves after its first audio bytes -> every
  service reports no open request (median).
Targets: added_ttfa_ms_p50 <= 5; gateway_over_grpc_c16 >= 0.95.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time

from bench.output import print_table, write_json

TEXT = "Hello there"


def deployment(ckpt: str | None) -> dict:
    """ckpt None: the tiny checkpoint `starmesh up` builds and caches."""
    svc = lambda component: {"component": component, "checkpoint": "omni", "replicas": ["x"]}  # noqa: E731
    omni = {"path": ckpt} if ckpt else {"tiny": "qwen3-omni"}
    return {"name": "bench-gateway", "checkpoints": {"omni": omni}, "gateway": {"address": "x"},
            "services": {"thinker": svc("thinker"), "talker": svc("talker"), "codec": svc("codec")},
            "models": {"qwen3-omni": {"pipeline": "qwen3-omni",
                                      "options": {"chunk_size": 25, "left_context": 25, "first_chunk": 4},
                                      "placement": {"prefill": "thinker", "decode": "thinker", "talker": "talker",
                                                    "code2wav": "codec"},
                                      "kv_contexts": {"thinker": ["prefill", "decode"]}}}}


def cpu_s(pid: int) -> float:
    """CPU seconds every thread of a process has run (Linux schedstat: nanoseconds, where
    /proc/PID/stat counts 10 ms ticks)."""
    import os

    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:  # a thread that ended meanwhile
            pass
    return total / 1e9


def params(frames: int) -> dict:
    return {"max_new_tokens": 8, "max_frames": frames, "min_frames": frames}


async def grpc_request(session, frames: int) -> tuple[float, int, float]:
    """(seconds to the first audio chunk, chunks, audio seconds)."""
    from client.events import AudioChunk
    from client.generate_call import GenerateCall

    t0, first, chunks, samples = time.perf_counter(), None, 0, 0
    call = GenerateCall("qwen3-omni", text=TEXT, params=params(frames), output_modalities=("audio",))
    async for ev in session.generate(call):
        if isinstance(ev, AudioChunk):
            first = first if first is not None else time.perf_counter() - t0
            chunks, samples = chunks + 1, samples + ev.num_samples
    return first, chunks, samples / 24000


def speech_body(frames: int) -> dict:
    return {"model": "qwen3-omni", "input": TEXT, "voice": "ethan", "response_format": "pcm", **params(frames)}


async def http_request(url: str, frames: int, leave_early: bool = False) -> tuple[float, int, float]:
    """(seconds to the first audio byte, 0, audio seconds) with bench.http_client;
    leave_early: close after it."""
    from bench.http_client import post_stream

    host, _, port = url.removeprefix("http://").rpartition(":")
    first, size = await post_stream(host, int(port), "/v1/audio/speech", speech_body(frames), leave_early)
    return first, 0, size / 2 / 24000


async def httpx_request(http, url: str, frames: int) -> tuple[float, int, float]:
    """The same with httpx (what the openai SDK uses)."""
    body = speech_body(frames)
    t0, first, size = time.perf_counter(), None, 0
    async with http.stream("POST", f"{url}/v1/audio/speech", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for data in response.aiter_raw():
            first = first if first is not None else time.perf_counter() - t0
            size += len(data)
    return first, 0, size / 2 / 24000


async def measure(cluster, args) -> dict:
    import httpx

    from client.connection import Connection
    from client.session import ConductorSession

    url, gateway_pid = cluster.endpoints()["gateway"], cluster.gateway.pid
    async with ConductorSession(Connection(cluster.conductor_address)) as session, \
            httpx.AsyncClient(timeout=300) as http:
        for _ in range(2):  # warm every path (first requests compile, connect, fill caches)
            await grpc_request(session, args.frames), await http_request(url, args.frames)
            await httpx_request(http, url, args.frames)
        added, added_httpx, gateway_cpu, chunks = [], [], 0.0, 0
        for i in range(args.rounds):  # the order alternating: drift cancels in the differences
            if i % 2:
                g_first, g_chunks, _ = await grpc_request(session, args.frames)
            cpu0 = cpu_s(gateway_pid)
            h_first, _, _ = await http_request(url, args.frames)
            gateway_cpu += cpu_s(gateway_pid) - cpu0
            x_first, _, _ = await httpx_request(http, url, args.frames)
            if not i % 2:
                g_first, g_chunks, _ = await grpc_request(session, args.frames)
            added.append(1000 * (h_first - g_first))
            added_httpx.append(1000 * (x_first - g_first))
            chunks += g_chunks
        ratios = []
        for i in range(args.waves):
            waves = [lambda: grpc_request(session, args.frames), lambda: http_request(url, args.frames)]
            rates = [await _wave(w, args.streams) for w in (waves if i % 2 == 0 else waves[::-1])]
            grpc_rate, http_rate = rates if i % 2 == 0 else rates[::-1]
            ratios.append(http_rate / grpc_rate)
        frees = [await _cancel_free_ms(url, cluster, args.frames * 8) for _ in range(args.cancels)]
    return {"added_ttfa_ms_p50": statistics.median(added), "added_ttfa_ms_p99": _p99(added),
            "added_ttfa_ms_p50_httpx": statistics.median(added_httpx), "added_ttfa_ms_p99_httpx": _p99(added_httpx),
            "gateway_cpu_us_per_chunk": 1e6 * gateway_cpu / max(chunks, 1),
            "gateway_cpu_us_per_request": 1e6 * gateway_cpu / args.rounds, "chunks_per_request": chunks / args.rounds,
            "gateway_over_grpc_c16": statistics.median(ratios), "cancel_free_ms": statistics.median(frees),
            "rounds": args.rounds, "waves": args.waves, "streams": args.streams, "frames": args.frames}


def _p99(values: list[float]) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))]


async def _wave(request, n: int) -> float:
    """Audio seconds per second of n requests at once."""
    t0 = time.perf_counter()
    results = await asyncio.gather(*(request() for _ in range(n)))
    return sum(r[2] for r in results) / (time.perf_counter() - t0)


async def _cancel_free_ms(url: str, cluster, frames: int) -> float:
    from runtime.run_client import ComponentClient

    async with contextlib.AsyncExitStack() as stack:  # connected before: the poll only asks
        clients = [await stack.enter_async_context(ComponentClient(p.address, tls=cluster.service_tls))
                   for p in cluster.services]
        await http_request(url, frames, leave_early=True)
        t0 = time.perf_counter()
        while sum([(await c.describe()).num_open_requests for c in clients]):
            await asyncio.sleep(0.005)
        return 1000 * (time.perf_counter() - t0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--checkpoint", help="a Qwen3-Omni checkpoint directory (default: the tiny one)")
    p.add_argument("--rounds", type=int, default=60, help="paired requests at concurrency 1 (the medians of differences of two ~100 ms TTFAs need many)")
    p.add_argument("--waves", type=int, default=4, help="paired waves of --streams requests")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--frames", type=int, default=64, help="codec frames per request (12.5 per second of audio)")
    p.add_argument("--cancels", type=int, default=5)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2 rounds, one wave of 2 streams, 4 frames, 1 cancel")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.waves, args.streams, args.frames, args.cancels = 2, 1, 2, 4, 1
    from cluster.launchable import read_launchable
    from cluster.launcher import Cluster
    from cluster.shipped_deployments import with_free_ports, write_deployment

    path = write_deployment(with_free_ports(deployment(args.checkpoint)))
    with Cluster(read_launchable(path), path, log=lambda line: None) as cluster:
        results = asyncio.run(measure(cluster, args))
    print_table([("added ttfa p50", "added_ttfa_ms_p50", "ms"), ("added ttfa p99", "added_ttfa_ms_p99", "ms"),
                 ("gateway CPU per chunk", "gateway_cpu_us_per_chunk", "us"),
                 ("gateway / gRPC at c16", "gateway_over_grpc_c16", "x"), ("cancel -> freed", "cancel_free_ms", "ms")],
                 results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
