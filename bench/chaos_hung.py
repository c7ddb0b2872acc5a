"""Hung replicas under `starmesh up` (the speech model, tiny checkpoints): a talker
stopped with SIGSTOP while it holds requests, the same talker killed with SIGKILL, and a
machine loaded with CPU hogs while requests run.

    python -m bench.chaos_hung --json out/hung.json [--rounds 2] [--hogs 8]
    figures = measure_hung_replica()        # flat keys, what bench.chaos reports

Figures (seconds from the signal, medians over rounds):
- hung_replica_detect_s: SIGSTOP to both the model's health NOT_SERVING and every request
  that had reached the talker failed (target <= 5); hung_replica_health_s and
  hung_replica_fail_s are the two halves; hung_replica_detected_while_stopped: the
  conductor found it before the supervisor killed it (1.0: every round);
- hung_replica_restart_s: SIGSTOP to the model SERVING again after the supervisor killed
  and restarted the talker;
- killed_replica_detect_s: the same detection after SIGKILL (target < 2);
- busy_restarts, busy_requests_failed: restarts and failed requests while `--hogs` CPU
  hogs load the machine and requests run (both must be 0);
- hung_bad_failures: failures that are not UNAVAILABLE naming the talker (must be 0).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.kill_round import SPEECH_MODEL, describe_open, speech_request, wait_model_serving
from bench.output import print_table, write_json
from bench.up_process import UpProcess

VICTIM = "talker"
# --quick (and bench.chaos --quick): the supervisor kills the stopped talker after two
# probes of 1.5 s (about 3 s) instead of three of 3 s, each 2 s apart (about 10 s): its
# restart path runs as it does with the defaults, sooner
QUICK_PROBES = ("--probe-period-s", "0.5", "--probe-timeout-s", "1.5", "--probe-failures", "2")
QUICK = {"rounds": 1, "num_speech": 1, "hogs": 2, "busy_s": 1.0,  # the busy round: one wave at least
         "probes": QUICK_PROBES}


def start_up(work_dir: str, probes: tuple[str, ...] = ()) -> UpProcess:
    """`starmesh up` of the shipped local deployment, the speech model alone, tiny checkpoint;
    `probes`: its liveness probe options (default: `up`'s)."""
    from cluster.checkpoints import tiny
    from cluster.shipped_deployments import rewrite_shipped

    path = rewrite_shipped("local", {"omni": str(tiny("qwen3-omni", print))}, (SPEECH_MODEL,), str(work_dir))
    return UpProcess(path, args=("--no-trace-store", *probes)).start()


def is_stopped(pid: int) -> bool:
    """The process is stopped (state T), not dead and not running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


async def not_serving(conductor: str, pid: int, timeout_s: float = 120.0) -> tuple[float, bool]:
    """(perf_counter when the model's health first reads NOT_SERVING, whether the victim
    was still stopped then)."""
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(conductor) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=SPEECH_MODEL), timeout=10)
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                return time.perf_counter(), is_stopped(pid)
            await asyncio.sleep(0.01)
    raise TimeoutError(f"{SPEECH_MODEL} still SERVING {timeout_s} s after the signal")


async def when_busy(address: str, tls, timeout_s: float = 120.0) -> None:
    """Until the service at `address` holds a request (tls: UpProcess.member_tls)."""
    deadline = time.monotonic() + timeout_s
    while await asyncio.to_thread(describe_open, address, tls) == 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{VICTIM} never held a request in {timeout_s} s")
        await asyncio.sleep(0.02)


def signal_round(up: UpProcess, sig: int, num_speech: int) -> dict:
    """`num_speech` requests, `sig` to the talker once it holds one; what followed."""
    address, restarts = up.endpoints[VICTIM], up.supervision()[VICTIM]["restarts"]

    async def run() -> dict:
        requests = [asyncio.create_task(speech_request(up.conductor)) for _ in range(num_speech)]
        await when_busy(address, up.member_tls)
        pid = up.supervision()[VICTIM]["pid"]
        t0 = time.perf_counter()
        os.kill(pid, sig)
        t_health, stopped = await not_serving(up.conductor, pid)
        outcomes = await asyncio.gather(*requests)
        failed = [o for o in outcomes if o.code != "OK"]
        bad = [o for o in failed if not (o.code == "UNAVAILABLE" and address in o.details)]
        t_fail = max((o.t_end for o in failed), default=t0)
        return {"health_s": t_health - t0, "fail_s": t_fail - t0, "detect_s": max(t_health, t_fail) - t0,
                "while_stopped": stopped, "failed": len(failed), "bad": len(bad), "t0": t0}

    result = asyncio.run(run())
    up.wait_restarted(VICTIM, restarts + 1)
    wait_model_serving(up.conductor, SPEECH_MODEL, timeout_s=120)
    result["restart_s"] = time.perf_counter() - result.pop("t0")
    return result


def busy_round(up: UpProcess, hogs: int, busy_s: float, num_speech: int) -> dict:
    """Requests back to back for `busy_s` while `hogs` processes spin on every core."""
    restarts = {name: entry["restarts"] for name, entry in up.supervision().items()}
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]

    async def run() -> list:
        deadline, outcomes = time.monotonic() + busy_s, []
        while time.monotonic() < deadline:
            outcomes += await asyncio.gather(*[speech_request(up.conductor) for _ in range(num_speech)])
        return outcomes

    try:
        outcomes = asyncio.run(run())
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    after = up.supervision()
    return {"busy_restarts": sum(after[n]["restarts"] - r for n, r in restarts.items()),
            "busy_requests_failed": sum(o.code != "OK" for o in outcomes), "busy_requests": len(outcomes)}


def measure_hung_replica(rounds: int = 2, num_speech: int = 4, hogs: int = 8, busy_s: float = 20.0,
                         up: UpProcess | None = None, log=print, probes: tuple[str, ...] = ()) -> dict:
    """The module docstring's figures; starts and stops its own `starmesh up` (with the
    liveness probe options `probes`) unless given one (then its deployment must serve the
    speech model with a `talker` service)."""
    with tempfile.TemporaryDirectory(prefix="starmesh-hung-") as work:
        own = up is None
        up = start_up(work, probes) if own else up
        try:
            hung = [signal_round(up, signal.SIGSTOP, num_speech) for _ in range(rounds)]
            killed = [signal_round(up, signal.SIGKILL, num_speech) for _ in range(rounds)]
            for name, results in (("SIGSTOP", hung), ("SIGKILL", killed)):
                for r in results:
                    log(f"{name}: health {r['health_s']:.2f} s, requests {r['fail_s']:.2f} s "
                        f"({r['failed']} failed, {r['bad']} bad), serving again {r['restart_s']:.1f} s")
            busy = busy_round(up, hogs, busy_s, num_speech) if hogs else {}
        finally:
            if own:
                up.stop()

    def median(results, key):
        return statistics.median(r[key] for r in results)

    return {"hung_replica_detect_s": median(hung, "detect_s"), "hung_replica_health_s": median(hung, "health_s"),
            "hung_replica_fail_s": median(hung, "fail_s"), "hung_replica_restart_s": median(hung, "restart_s"),
            "hung_replica_detected_while_stopped": sum(r["while_stopped"] for r in hung) / len(hung),
            "killed_replica_detect_s": median(killed, "detect_s"),
            "hung_bad_failures": sum(r["bad"] for r in hung + killed), **busy}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos_hung", description=__doc__.split("\n")[0])
    p.add_argument("--json", metavar="PATH", help="write the figures here")
    p.add_argument("--rounds", type=int, default=2, help="SIGSTOP rounds, and as many SIGKILL rounds")
    p.add_argument("--hogs", type=int, default=8, help="CPU hogs of the busy round (0: no busy round)")
    p.add_argument("--busy-s", type=float, default=20.0, help="how long the busy round runs requests")
    p.add_argument("--quick", action="store_true", help="smoke run: one round each, 1 request, 2 hogs for 1 s")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    kwargs = QUICK if args.quick else {"rounds": args.rounds, "hogs": args.hogs, "busy_s": args.busy_s}
    results = measure_hung_replica(**kwargs)
    results["bench_wall_s"] = time.perf_counter() - t0
    print_table([("SIGSTOP -> detected", "hung_replica_detect_s", "s"),
                 ("  -> model NOT_SERVING", "hung_replica_health_s", "s"),
                 ("  -> its requests failed", "hung_replica_fail_s", "s"),
                 ("SIGSTOP -> serving again", "hung_replica_restart_s", "s"),
                 ("SIGKILL -> detected", "killed_replica_detect_s", "s"),
                 ("restarts under load", "busy_restarts", ""),
                 ("failed requests under load", "busy_requests_failed", "")], results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
