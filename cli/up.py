"""`starmesh up [--deployment FILE]`: start a deployment's conductor and services, wait until
they serve, print the endpoints, and run until Ctrl-C / SIGTERM, then stop everything.

A local trace store (OTLP) runs alongside; every process sends spans to it (and to
OTEL_EXPORTER_OTLP_ENDPOINT as well, when set). `starmesh trace REQUEST_ID` reads it.
`--trace-ui` also runs Arize Phoenix (cluster/phoenix.py) as that collector and UI.
Every process is supervised: one that dies is logged and restarted on its port with
exponential backoff (--restart-backoff-s doubling up to --restart-backoff-max-s), a crash
loop is logged and shown by `starmesh status`; a gRPC process that stops answering its
liveness probe (--probe-failures in a row, every --probe-period-s, each --probe-timeout-s)
is killed and restarted the same way; children die with `up`, even by SIGKILL.
`--verbose` prints where start-up time went (cluster/startup.py); `--prometheus-config
FILE` writes a scrape config for every /metrics (cluster/prometheus_config.py).
What runs is cluster.stack's; this module parses and prints.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading

from cli.connection_args import add_api_key_arg, add_tls_args, api_key_from_args, tls_from_args


def add_parser(sub) -> None:
    from cluster.deployment_dir import DEFAULT_DEPLOYMENT

    p = sub.add_parser("up", help="start a deployment (conductor + services) on this machine",
                       description="Start every process of a deployment file and keep them running.")
    p.add_argument("--deployment", default=str(DEFAULT_DEPLOYMENT), metavar="FILE",
                   help="cluster deployment file (default: the shipped compose/deployments/local.yaml)")
    p.add_argument("--no-trace-store", action="store_true", help="do not run the local trace store")
    p.add_argument("--trace-ui", action="store_true",
                   help="also run Arize Phoenix as OTLP receiver and trace UI on localhost (installed from PyPI "
                        "into its own virtualenv on first use); every process exports to it")
    add_tls_args(p, "every process of the deployment (default: the deployment's tls)")
    add_api_key_arg(p, "the conductor's token, passed to it in its environment")
    p.add_argument("--restart-backoff-s", type=float, default=0.5, metavar="S",
                   help="first delay before restarting a process that died; doubles per consecutive death")
    p.add_argument("--restart-backoff-max-s", type=float, default=10.0, metavar="S",
                   help="longest delay between restarts")
    p.add_argument("--probe-period-s", type=float, default=2.0, metavar="S",
                   help="how often each gRPC process's liveness is probed (a health check)")
    p.add_argument("--probe-timeout-s", type=float, default=3.0, metavar="S",
                   help="how long one liveness probe waits for its answer")
    p.add_argument("--probe-failures", type=int, default=3, metavar="N",
                   help="unanswered probes in a row that make a process hung: killed and restarted (0: no probes)")
    p.add_argument("--prometheus-config", metavar="FILE",
                   help="write a Prometheus scrape config for every process's /metrics to FILE once all serve "
                        "(cluster/prometheus_config.py; docs/operations.md)")
    p.add_argument("--verbose", action="store_true",
                   help="print where start-up time went, phase by phase, and each process's time and CPU "
                        "to SERVING (cluster/startup.py)")
    p.set_defaults(func=run)


def start_errors() -> tuple[type[BaseException], ...]:
    """What a deployment that cannot start raises (a bad file, a port in use, a process
    that exits or never serves, a checkpoint build that fails): one line naming the
    cause, not a traceback, for the commands that start one (`up`, `demo`)."""
    from core.errors import GraphError, StarmeshError

    return (GraphError, StarmeshError, ValueError, OSError, RuntimeError, TimeoutError,
            subprocess.CalledProcessError)


def run(args: argparse.Namespace) -> int:
    from cluster.stack import start_stack
    from cluster.startup import StartupTimes, process_age_s
    from cluster.supervisor import SupervisorConfig

    times = StartupTimes()
    times.add("interpreter and imports of `up`", process_age_s() or 0.0)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        supervision = SupervisorConfig(backoff_base_s=args.restart_backoff_s, backoff_max_s=args.restart_backoff_max_s,
                                       probe_period_s=args.probe_period_s, probe_timeout_s=args.probe_timeout_s,
                                       probe_failures=args.probe_failures)
        stack = start_stack(args.deployment, trace_store=not args.no_trace_store, trace_ui=args.trace_ui,
                            tls=tls_from_args(args), api_key=api_key_from_args(args), supervision=supervision,
                            times=times)
    except start_errors() as e:
        print(f"starmesh up: {e}", file=sys.stderr)
        return 2
    try:
        if args.verbose:
            for line in times.lines(total_s=process_age_s()):
                print(f"starmesh | {line}", flush=True)
        if args.prometheus_config:
            _write_prometheus_config(stack, args.prometheus_config)
        _print_endpoints(stack)
        print("serving; Ctrl-C stops everything", flush=True)
        stop.wait()
    finally:
        print("stopping ...", flush=True)
        stack.stop()
    return 0


def _write_prometheus_config(stack, path: str) -> None:
    from cluster.prometheus_config import render

    try:
        with open(path, "w") as f:
            f.write(render(stack.cluster.deployment, stack.cluster.path))
    except OSError as e:  # the mesh serves anyway: only the file is missing
        print(f"starmesh up: could not write the Prometheus config: {e}", file=sys.stderr, flush=True)
        return
    print(f"starmesh | Prometheus scrape config: {path}", flush=True)


def _print_endpoints(stack) -> None:
    for name, address in stack.cluster.endpoints().items():
        print(f"  {name:<14} {address:<22} metrics {stack.cluster.metrics.get(name, '-')}")
        if name == "gateway":  # its voice page (gateway/static), served at /
            print(f"  {'voice page':<14} {address}/  (talk to a speaking model in the browser)")
    if stack.store is not None:
        print(f"  {'trace store':<14} OTLP {stack.store.otlp_address}, query {stack.store.http_address}")
    if stack.ui is not None:
        print(f"  {'trace UI':<14} {stack.ui.url} (Phoenix; OTLP {stack.ui.otlp_endpoint})")
