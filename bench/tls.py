"""TLS cost: the same small request through a plaintext mesh, a mutual-TLS mesh and a
mesh whose members run mutual TLS between them (what `starmesh up` runs by default).

    python -m bench.tls --json bench-results/tls.json [--quick]
    measure_tls_hop(rounds=7)   # what bench.chaos reports as tls_hop_over_plain

Three bench.tls_mesh.ToyMesh meshes run side by side (three toy service processes and a
conductor each; the client and the conductors in this process). A request is one item
through the `pipe` model: client -> conductor -> A ~> B ~> C -> conductor -> client, five
connections (conductor to each service, A to B and B to C on peer streams, the client to
the conductor). In the TLS mesh each is TLS 1.3 with client certificates; in the member
mesh the four between members are (the services' `--mesh-tls`, certificates from
cluster/mesh_ca.py) and the client's is plaintext, as the default deployment's front door.
All meshes check the same API key, so the ratios are TLS's cost alone. Connections are
warm (a handshake is per connection, not per request).

Figures: plain_hop_us / tls_hop_us / mtls_hop_us: the median over rounds of each round's
median request latency (one request at a time); tls_hop_over_plain and
mtls_hop_over_plain (target <= 1.15): the median of the rounds' paired ratios (that mesh
/ plain), the rounds alternating the meshes' order so that drift on a shared machine
falls on all. *_echo_us / *_echo_over_plain: the same for a bare unary call (health
Check) to service B, the floor of one TLS link.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from bench.output import print_table, write_json

API_KEY = "bench-key"
QUICK = {"rounds": 1, "requests": 2, "warmup": 1}  # --quick, chaos --quick
MTLS_TARGET = 1.15  # mtls_hop_over_plain: what the members' mutual TLS may cost a request
SIDES = ("tls", "mtls")  # measured against "plain"


def measure_tls_hop(rounds: int = 7, requests: int = 40, warmup: int = 10) -> dict:
    """{"tls_hop_over_plain", "mtls_hop_over_plain", "plain_hop_us", "tls_hop_us",
    "mtls_hop_us", the same for "echo", "rounds", "requests_per_round"} (module docstring)."""
    from bench.tls_certs import make_certs
    from bench.tls_mesh import ToyMesh
    from client.connection import Connection
    from cluster.mesh_ca import member_files, write_member_files
    from runtime.tls import TlsConfig

    with tempfile.TemporaryDirectory(prefix="starmesh-bench-tls-") as directory:
        certs = make_certs(directory)
        tls = TlsConfig(certs.mesh_cert, certs.mesh_key, certs.ca)
        members = write_member_files(f"{directory}/members", member_files("bench"))
        with ToyMesh(None, API_KEY) as plain, ToyMesh(tls, API_KEY) as secure, \
                ToyMesh(None, API_KEY, members=members) as member:
            client_tls = TlsConfig(certs.client_cert, certs.client_key, certs.ca)
            sides = {"plain": (Connection(plain.address, API_KEY), plain.services["b"].address, None),
                     "tls": (Connection(secure.address, API_KEY, client_tls), secure.services["b"].address, tls),
                     "mtls": (Connection(member.address, API_KEY), member.services["b"].address,
                              member.service_tls)}
            per_round = asyncio.run(_rounds(sides, rounds, requests, warmup))
    results = {"rounds": rounds, "requests_per_round": requests}
    for figure in ("hop", "echo"):
        for side in SIDES:
            ratios = [r[f"{side}_{figure}"] / r[f"plain_{figure}"] for r in per_round]
            results[f"{side}_{figure}_over_plain"] = statistics.median(ratios)
        for side in ("plain", *SIDES):
            results[f"{side}_{figure}_us"] = statistics.median(r[f"{side}_{figure}"] for r in per_round)
    return results


async def _rounds(sides: dict, rounds: int, requests: int, warmup: int) -> list[dict[str, float]]:
    """Per round: {"<side>_hop", "<side>_echo"} for every side: median latencies (us), the
    meshes' order reversed every other round. sides: name -> (Connection, service B, its TLS)."""
    from bench.transport import grpc_echo_us
    from protos.starmesh.v1 import conductor_pb2_grpc

    channels = {name: conn.aio_channel() for name, (conn, _, _) in sides.items()}
    try:
        stubs = {name: conductor_pb2_grpc.ConductorStub(ch) for name, ch in channels.items()}
        for name, stub in stubs.items():  # connections up, handshakes done, caches warm
            await _latencies_us(stub, f"warm-{name}", warmup)
        out = []
        for i in range(rounds):
            figures = {}
            for name in (list(sides) if i % 2 == 0 else list(reversed(sides))):
                figures[f"{name}_hop"] = statistics.median(await _latencies_us(stubs[name], f"r{i}-{name}", requests))
                _, service, tls = sides[name]
                figures[f"{name}_echo"] = await grpc_echo_us(service, requests, tls)
            out.append(figures)
        return out
    finally:
        for channel in channels.values():
            await channel.close()


async def _latencies_us(stub, prefix: str, n: int) -> list[float]:
    from bench.tls_mesh import one_request

    out = []
    for j in range(n):
        values, seconds = await one_request(stub, f"{prefix}-{j}")
        if values != [1.0]:
            raise RuntimeError(f"request {prefix}-{j} returned {values}, expected [1.0]")
        out.append(seconds * 1e6)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tls", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--rounds", type=int, default=7, help="paired rounds (plain and TLS each)")
    p.add_argument("--requests", type=int, default=40, help="requests per mesh per round, one at a time")
    p.add_argument("--quick", action="store_true", help="smoke run: one round of 2 requests, 1 warm-up")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    results = measure_tls_hop(**QUICK) if args.quick else measure_tls_hop(args.rounds, args.requests)
    results["bench_wall_s"] = time.perf_counter() - t0
    print_table([("request, plaintext mesh", "plain_hop_us", "us"), ("request, mutual-TLS mesh", "tls_hop_us", "us"),
                 ("request TLS / plain (paired)", "tls_hop_over_plain", "x"),
                 ("request, members' mutual TLS", "mtls_hop_us", "us"),
                 ("request members' mTLS / plain (paired)", "mtls_hop_over_plain", f"x (target <= {MTLS_TARGET})"),
                 ("unary echo, plaintext", "plain_echo_us", "us"), ("unary echo, mutual TLS", "tls_echo_us", "us"),
                 ("echo TLS / plain (paired)", "tls_echo_over_plain", "x"),
                 ("unary echo, member TLS", "mtls_echo_us", "us"),
                 ("echo member TLS / plain (paired)", "mtls_echo_over_plain", "x")], results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
