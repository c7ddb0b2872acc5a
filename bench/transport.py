"""Transport benchmark: memcpy vs shm vs Mooncake TCP vs inline gRPC, and small hand-offs.

    python -m bench.transport --json bench-results/transport.json [--quick]

The bench process is the producer holding the tensor; consumers are real service
processes (`sum`: resolves its input and sums it). A hand-off is timed from the
producer holding the tensor until the consumer's sum is back. Speeds are GB/s
(1e9 bytes/s). Also checks a two-service round trip (producer -> echo -> producer)
through every transport.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from bench.output import print_table, write_json

MiB = 1 << 20
HEADLINE_BYTES = 64 * MiB
FIT_SIZES = [4096 * 4**i for i in range(8)]  # 4 KiB .. 64 MiB
HOST, REMOTE_HOST = "bench-host", "bench-remote"
FIXTURES = "bench.echo_components"


def copy_and_sum(src, dst) -> float:
    """The limit: in one process, copy the tensor and sum the copy."""
    t0 = time.perf_counter()
    dst.copy_(src)
    float(dst.sum())
    return time.perf_counter() - t0


class Producer:
    """The bench side: one Transport per forced mode, one Run stream per consumer."""

    def __init__(self, transport, run, hosts: tuple[str, ...]) -> None:
        self.transport, self.run, self.hosts = transport, run, hosts
        self.count = 0

    async def handoff(self, x) -> tuple[float, float]:
        """Seconds from holding `x` until the consumer's sum arrives; and that sum."""
        from runtime.items import NodeError, NodeOutput, OpenNode

        self.count += 1
        rid = f"bench-{self.count}"
        t0 = time.perf_counter()
        ref = self.transport.export(x, request_id=rid, carrier="bench", consumer_host_ids=self.hosts)
        await self.run.send([OpenNode(rid, "sum", inputs={"x": ref}, consumer_host_ids=(HOST,))])
        events = (await self.run.until_finished([rid]))[rid]
        elapsed = time.perf_counter() - t0
        errors = [e for e in events if isinstance(e, NodeError)]
        if errors:
            raise RuntimeError(f"consumer failed: {errors[0].status}: {errors[0].message}")
        out = next(e for e in events if isinstance(e, NodeOutput))
        total = float(self.transport.resolve(out.tensors["x"]).tensor)
        if ref.lease_id is not None:  # the consumer is done (NodeDone): acknowledge
            self.transport.release([ref.lease_id])
        return elapsed, total

    async def timed(self, nbytes: int, repeats: int, with_memcpy: bool = False) -> tuple[float, float]:
        """Median hand-off seconds; with_memcpy also times copy_and_sum before each
        hand-off (interleaved, so machine noise hits the baseline and the hand-off alike)."""
        import torch

        x = torch.rand(nbytes // 4)
        dst = torch.empty_like(x)
        expected = float(x.sum(dtype=torch.float64))
        times, baseline = [], []
        for _ in range(repeats + 1):  # the first round warms the arena pages and dst
            if with_memcpy:
                baseline.append(copy_and_sum(x, dst))
            elapsed, total = await self.handoff(x)
            if abs(total - expected) > 1e-3 * max(1.0, abs(expected)):
                raise AssertionError(f"consumer summed {total}, expected {expected}")
            times.append(elapsed)
        return statistics.median(times[1:]), (statistics.median(baseline[1:]) if with_memcpy else float("nan"))


def fit_alpha_beta(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares T = alpha + bytes / beta (formula (8)); alpha in us, beta in GB/s."""
    import numpy as np

    sizes, times = np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)
    # Weighted by 1/T: relative errors count alike, so the 64 MiB points do not
    # drown the small ones that determine alpha.
    slope, intercept = np.polyfit(sizes, times, 1, w=1.0 / times)
    return intercept * 1e6, (1.0 / slope / 1e9 if slope > 0 else float("inf"))


async def grpc_echo_us(address: str, repeats: int, tls=None, interval_s: float = 0.0) -> float:
    """Bare unary round trip (health Check): the floor for any hand-off; `tls`: a
    runtime.tls.TlsConfig for a TLS service; interval_s: the pause before each call
    (0: back to back, processes that stay hot; a pause lets them go idle, as a paced
    stream's do between items, and an idle process wakes slower on a small VM)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from runtime.tls import aio_channel

    async with aio_channel(address, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        times = []
        for _ in range(repeats + 10):
            if interval_s:
                await asyncio.sleep(interval_s)
            t0 = time.perf_counter()
            await stub.Check(health_pb2.HealthCheckRequest())
            times.append(time.perf_counter() - t0)
    return statistics.median(times[10:]) * 1e6


async def round_trip(transport, address: str, mode: str) -> None:
    """Producer -> echo service -> producer: the tensor comes back bit-identical."""
    import torch

    from runtime.run_client import ComponentClient
    from runtime.items import NodeOutput, OpenNode, Release

    x = torch.randn(3, 1000, 70).to(torch.bfloat16)[:, ::2]  # non-contiguous, 420 KB
    async with ComponentClient(address, 128 * MiB) as run:
        hosts = (REMOTE_HOST,) if mode == "mooncake" else (HOST,)
        ref = transport.export(x, request_id="rt", carrier="rt", consumer_host_ids=hosts)
        await run.send([OpenNode("rt", "echo", inputs={"x": ref}, consumer_host_ids=(transport.host_id,))])
        events = (await run.until_finished(["rt"]))["rt"]
        outputs = [e for e in events if isinstance(e, NodeOutput)]
        if not outputs:
            raise RuntimeError(f"echo via {mode} failed: {events}")
        out = outputs[0].tensors["x"]
        back = transport.resolve(out)
        if not torch.equal(back.tensor, x):
            raise AssertionError(f"round trip through {mode} changed the tensor")
        back.close()
        await run.send([Release("rt", (out.lease_id,) if out.lease_id else ())])
        if ref.lease_id:
            transport.release([ref.lease_id])
    print(f"round trip via {mode:8s} -> echo service -> {out.kind:8s}: ok")


def start_services():
    from runtime.process import ServiceProcess

    big = ["--max-message-mb", "160", "--arena-bytes", str(512 * MiB)]
    return {
        "sum": ServiceProcess(f"{FIXTURES}:make_sum", ["--host-id", HOST, *big], name="sum"),
        "sum_remote": ServiceProcess(
            f"{FIXTURES}:make_sum", ["--host-id", REMOTE_HOST, "--mooncake", *big], name="sum-remote"
        ),
        "echo": ServiceProcess(f"{FIXTURES}:make_echo", ["--host-id", HOST, *big], name="echo"),
        "echo_remote": ServiceProcess(
            f"{FIXTURES}:make_echo", ["--host-id", REMOTE_HOST, "--mooncake", *big], name="echo-remote"
        ),
    }


async def run_transports(services: dict, repeats: int, fit_repeats: int) -> dict:
    from runtime.run_client import ComponentClient
    from transport.config import TransportConfig
    from transport.transport import Transport

    def tx(mode: str) -> Transport:
        return Transport(TransportConfig(host_id=HOST, mode=mode, arena_bytes=256 * MiB,
                                         enable_mooncake=mode == "mooncake"))

    results, transports = {}, {m: tx(m) for m in ("inline", "shm", "mooncake")}
    targets = {"inline": ("sum", ()), "shm": ("sum", (HOST,)), "mooncake": ("sum_remote", (REMOTE_HOST,))}
    try:
        for mode, transport in transports.items():
            echo = services["echo_remote" if mode == "mooncake" else "echo"]
            await round_trip(transport, echo.address, mode)
        for mode, (service, hosts) in targets.items():
            async with ComponentClient(services[service].address, 160 * MiB) as run:
                producer = Producer(transports[mode], run, hosts)
                headline, memcpy = await producer.timed(HEADLINE_BYTES, repeats, with_memcpy=mode == "shm")
                if mode == "shm":
                    results["memcpy_gbps"] = HEADLINE_BYTES / memcpy / 1e9
                key = "grpc_inline" if mode == "inline" else ("mooncake_tcp" if mode == "mooncake" else mode)
                results[f"{key}_gbps"] = HEADLINE_BYTES / headline / 1e9
                points = [(n, (await producer.timed(n, fit_repeats))[0]) for n in FIT_SIZES]
                results[f"{mode}_alpha_us"], results[f"{mode}_beta_gbps"] = fit_alpha_beta(points)
                results[f"{mode}_points_us"] = {str(n): t * 1e6 for n, t in points}
                print(f"{mode:8s} 64 MiB hand-off: {results[key + '_gbps']:.2f} GB/s", flush=True)
        async with ComponentClient(services["sum"].address) as run:
            auto = Transport(TransportConfig(host_id=HOST, arena_bytes=16 * MiB))
            transports["auto"] = auto
            results["small_handoff_us"] = (await Producer(auto, run, (HOST,)).timed(4096, 200))[0] * 1e6
        results["grpc_echo_us"] = await grpc_echo_us(services["sum"].address, 200)
    finally:
        for transport in transports.values():
            transport.close()
    return results


def report(results: dict) -> None:
    rows = [
        ("memcpy (limit)", "memcpy_gbps", "GB/s"),
        ("shm hand-off", "shm_gbps", "GB/s"),
        ("mooncake tcp hand-off", "mooncake_tcp_gbps", "GB/s"),
        ("grpc inline hand-off", "grpc_inline_gbps", "GB/s"),
        ("shm / memcpy", "shm_over_memcpy", "x (target >= 0.8)"),
        ("4 KiB hand-off", "small_handoff_us", "us"),
        ("bare unary echo", "grpc_echo_us", "us"),
        ("hand-off / echo", "small_handoff_over_echo", "x (target <= 1.5)"),
    ]
    rows += [(f"{m} alpha / beta", f"{m}_alpha_us", f"us / {results[f'{m}_beta_gbps']:.2f} GB/s")
             for m in ("inline", "shm", "mooncake")]
    print_table(rows, results)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transport", description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    parser.add_argument("--repeats", type=int, default=20, help="hand-offs per 64 MiB median")
    parser.add_argument("--fit-repeats", type=int, default=5, help="hand-offs per size for the alpha/beta fit")
    parser.add_argument("--quick", action="store_true", help="smoke run: one hand-off per figure (every size)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.fit_repeats = 1, 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)  # like every service process
    results = {}
    services = start_services()
    try:
        for svc in services.values():  # in parallel: each child imports torch on its own
            svc.launch()
        for svc in services.values():
            svc.wait_serving()
        results.update(asyncio.run(run_transports(services, args.repeats, args.fit_repeats)))
    finally:
        for svc in services.values():
            svc.stop()
    results["shm_over_memcpy"] = results["shm_gbps"] / results["memcpy_gbps"]
    results["small_handoff_over_echo"] = results["small_handoff_us"] / results["grpc_echo_us"]
    report(results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
