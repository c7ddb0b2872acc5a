"""`starmesh up [--deployment FILE]`: start a deployment's conductor and services, wait until
they serve, print the endpoints, and run until Ctrl-C / SIGTERM, then stop everything.

A local trace store (OTLP) runs alongside; every process sends spans to it (and to
OTEL_EXPORTER_OTLP_ENDPOINT as well, when set). `starmesh trace REQUEST_ID` reads it.
`--trace-ui` also runs Arize Phoenix (cluster/phoenix.py) as that collector and UI.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from pathlib import Path

DEFAULT_DEPLOYMENT = Path(__file__).resolve().parents[2] / "compose" / "deployments" / "local.yaml"
STORE_FILE = "trace-store"  # under the cache root: where `starmesh trace` finds the running store


def add_parser(sub) -> None:
    p = sub.add_parser("up", help="start a deployment (conductor + services) on this machine",
                       description="Start every process of a deployment file and keep them running.")
    p.add_argument("--deployment", default=str(DEFAULT_DEPLOYMENT), metavar="FILE",
                   help="cluster deployment file (default: compose/deployments/local.yaml)")
    p.add_argument("--no-trace-store", action="store_true", help="do not run the local trace store")
    p.add_argument("--trace-ui", action="store_true",
                   help="also run Arize Phoenix as OTLP receiver and trace UI on localhost (installed from PyPI "
                        "into its own virtualenv on first use); every process exports to it")
    p.set_defaults(func=run)


def start_stack(deployment: str, trace_store: bool = True):
    """(TraceStore | None, Cluster) started; the caller stops both (cluster first)."""
    from cluster.launcher import Cluster
    from cluster.spec import ClusterSpec
    from cluster.trace_store import TraceStore

    spec = ClusterSpec.load(deployment)
    store = TraceStore().start() if trace_store else None
    if store is not None:
        _publish(store)
    try:
        cluster = Cluster(spec, deployment, trace_store=store.otlp_address if store else "").start()
    except BaseException:
        if store is not None:
            store.stop()
            _unpublish()
        raise
    return store, cluster


def stop_stack(store, cluster) -> None:
    cluster.stop()
    if store is not None:
        store.stop()
        _unpublish()


def _publish(store) -> None:
    from cluster.checkpoints import cache_root

    cache_root().mkdir(parents=True, exist_ok=True)
    (cache_root() / STORE_FILE).write_text(store.http_address)


def _unpublish() -> None:
    from cluster.checkpoints import cache_root

    (cache_root() / STORE_FILE).unlink(missing_ok=True)


def _start(args: argparse.Namespace):
    """(Phoenix | None, store, cluster). Phoenix starts first, so that every process inherits
    its endpoint, and is stopped again when the stack fails to start."""
    ui = None
    if args.trace_ui:
        from cluster.phoenix import start_trace_ui

        ui = start_trace_ui(log=lambda m: print(f"starmesh | {m}", flush=True))
    try:
        return (ui, *start_stack(args.deployment, not args.no_trace_store))
    except BaseException:
        if ui is not None:
            ui.stop()
        raise


def run(args: argparse.Namespace) -> int:
    from core.errors import GraphError

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        ui, store, cluster = _start(args)
    except (GraphError, RuntimeError, TimeoutError, subprocess.CalledProcessError) as e:
        print(f"starmesh up: {e}", file=sys.stderr)
        return 2
    try:
        for name, address in cluster.endpoints().items():
            print(f"  {name:<14} {address:<22} metrics {cluster.metrics.get(name, '-')}")
        if store is not None:
            print(f"  {'trace store':<14} OTLP {store.otlp_address}, query {store.http_address}")
        if ui is not None:
            print(f"  {'trace UI':<14} {ui.url} (Phoenix; OTLP {ui.otlp_endpoint})")
        print("serving; Ctrl-C stops everything", flush=True)
        stop.wait()
    finally:
        print("stopping ...", flush=True)
        stop_stack(store, cluster)
        if ui is not None:
            ui.stop()
    return 0
