"""The fuzz benchmark: every RPC of a real mesh attacked with raw, truncated, bit-flipped
and hostile messages; what comes back must be INVALID_ARGUMENT-class, nothing may crash,
and the processes' memory must stay flat.

    python -m bench.fuzz --json PATH [--messages 10000] [--seed 0] [--quick]
    run_fuzz(10000) -> {"fuzz_messages", "fuzz_bad_statuses", "rss_growth_mb", ...}

Three parts in five are byte-level mutations of valid messages (bench.fuzz_mutations),
two in five well-formed hostile messages (bench.fuzz_hostile). RSS growth is measured
from after a warm-up (the first 5% of the messages: gRPC's buffers, the allocator's
arenas, caches) to the end, per process; the figure is the largest.
"""
from __future__ import annotations

import argparse
import collections
import json
import random
import time

import grpc

from bench.fuzz_hostile import for_each, hostile_calls
from bench.fuzz_mesh import FuzzMesh, tiny_checkpoints
from bench.fuzz_mutations import mutated_calls
from bench.fuzz_rpcs import FuzzCall, Outcome, channel_options, send
from bench.fuzz_seeds import seeds

QUICK_MESSAGES = 200  # --quick, chaos --quick
CALL_TIMEOUT_S = 120.0  # a hang, not a slow answer: every fuzzed call ends long before
WARMUP_SHARE = 0.05


class FuzzSession:
    """Sends calls to a mesh and keeps the verdicts: counts by (method, origin, status),
    the bad outcomes, and RSS per process at the baseline and now."""

    def __init__(self, mesh: FuzzMesh, service: str = "thinker") -> None:
        self.mesh = mesh
        targets = {"conductor": mesh.conductor, "service": mesh.services[service], "trace_store": mesh.trace_store}
        self.channels = {k: grpc.insecure_channel(a, options=channel_options()) for k, a in targets.items()}
        self.counts: collections.Counter = collections.Counter()
        self.bad: list[Outcome] = []
        self.num_calls = 0
        self.baseline = mesh.rss_mb()

    def call(self, call: FuzzCall) -> Outcome:
        outcome = send(self.channels[call.rpc.target], call, CALL_TIMEOUT_S)
        self.num_calls += 1
        self.counts[(call.rpc.method.rsplit("/", 1)[-1], call.origin, outcome.status)] += 1
        if outcome.is_bad:
            self.bad.append(outcome)
        return outcome

    def mark_baseline(self) -> None:
        self.baseline = self.mesh.rss_mb()

    def rss_growth_mb(self) -> dict[str, float]:
        now = self.mesh.rss_mb()
        return {name: round(now[name] - self.baseline[name], 1) for name in now}

    def seeds_still_served(self) -> list[str]:
        """Every valid seed once more: what did not come back OK (a wedged server)."""
        failed = []
        for rpc, payloads in seeds().items():
            for payload in payloads:
                outcome = send(self.channels[rpc.target], FuzzCall(rpc, payload, "seed"), CALL_TIMEOUT_S)
                if outcome.status != "OK" or outcome.node_errors:
                    failed.append(f"{rpc.method}: {outcome.status} {outcome.details[:200]} {outcome.node_errors}")
        return failed

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()


def describe(outcome: Outcome) -> str:
    c = outcome.call
    return (f"{c.rpc.method} ({c.origin}, {c.nbytes} bytes): {outcome.status} {outcome.details[:300]!r} "
            f"node errors {[e for e in outcome.node_errors if e[0] != 'INVALID_ARGUMENT'][:3]}")


def fuzz(session: FuzzSession, num_messages: int, seed: int = 0) -> None:
    """num_messages calls: the mutated ones first (the warm-up among them), then hostile."""
    num_hostile = num_messages * 2 // 5
    warmup = max(1, int(num_messages * WARMUP_SHARE))
    for i, call in enumerate(mutated_calls(random.Random(seed), seeds(), num_messages - num_hostile)):
        session.call(call)
        if i + 1 == warmup:
            session.mark_baseline()
    if num_hostile:
        for_each(hostile_calls(), num_hostile, seed, session.call)


def run_fuzz(num_messages: int = 10000, seed: int = 0, log=lambda line: None) -> dict:
    t0 = time.perf_counter()
    with FuzzMesh(tiny_checkpoints(), log=log) as mesh:
        session = FuzzSession(mesh)
        try:
            fuzz(session, num_messages, seed)
            growth = session.rss_growth_mb()
            wedged = session.seeds_still_served()
            alive = mesh.alive()
        finally:
            session.close()
    return {
        "fuzz_messages": session.num_calls,
        "fuzz_bad_statuses": len(session.bad),
        "rss_growth_mb": max(growth.values()),
        "rss_growth_mb_by_process": growth,
        "fuzz_processes_alive": all(alive.values()),
        "fuzz_seeds_failing_after": wedged,
        "fuzz_statuses": {" ".join(k): v for k, v in sorted(session.counts.items())},
        "fuzz_bad_examples": [describe(o) for o in session.bad[:20]],
        "fuzz_s": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--messages", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="smoke run: 200 messages")
    args = p.parse_args(argv)
    if args.quick:
        args.messages = QUICK_MESSAGES
    result = run_fuzz(args.messages, args.seed, log=print)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if result["fuzz_bad_statuses"] == 0 and result["fuzz_processes_alive"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
