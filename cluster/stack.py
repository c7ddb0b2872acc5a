"""What `starmesh up` runs: a deployment's processes (cluster.launcher.Cluster), the local
trace store every process exports to, and optionally Arize Phoenix as collector and UI.

    stack = start_stack("deployment.yaml")
    try: ... stack.cluster.conductor_address ...
    finally: stack.stop()

The running store's query URL is published under the cache root while the stack runs:
that is where `starmesh trace` finds it (published_trace_store); so is the supervisor's
view of every process (cluster.supervision_file), which `starmesh status` shows.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cluster.launchable import read_launchable
from cluster import supervision_file
from cluster.launcher import Cluster
from cluster.startup import StartupTimes
from cluster.supervisor import SupervisorConfig
from cluster.trace_store import TraceStore
from core.cache_root import cache_root

if TYPE_CHECKING:
    from cluster.phoenix import Phoenix

STORE_FILE = "trace-store"  # under the cache root; holds the store's query URL


def _log(message: str) -> None:
    print(f"starmesh | {message}", flush=True)


@dataclass
class Stack:
    cluster: Cluster
    store: TraceStore | None = None
    ui: "Phoenix | None" = None
    times: StartupTimes | None = None  # where start_stack spent its time

    def stop(self) -> None:
        """The cluster first (no process exports after its store is gone), then the store,
        then Phoenix."""
        try:
            self.cluster.stop()
            supervision_file.unpublish(self.cluster.deployment.conductor)
            _stop_store(self.store)
        finally:
            if self.ui is not None:
                self.ui.stop()


def start_stack(deployment: str | Path, trace_store: bool = True, trace_ui: bool = False, log=_log,
                tls=None, api_key: str = "", supervision: SupervisorConfig = SupervisorConfig(),
                times: StartupTimes | None = None) -> Stack:
    """Every process of the deployment file SERVING and supervised (`supervision`), with
    the local trace store (unless `trace_store` is False) and Phoenix (if `trace_ui`). Phoenix starts first, so that
    every process inherits its endpoint. Whatever started is stopped again when a later
    part fails (the error propagates: GraphError for a bad file, RuntimeError or
    TimeoutError for a process that does not come up). `tls` (runtime.tls.TlsConfig)
    replaces the deployment's; `api_key` goes to the conductor (cluster.launcher);
    `times` (cluster.startup) gets the time of each phase."""
    times = times if times is not None else StartupTimes()
    ui = None
    if trace_ui:
        from cluster.phoenix import start_trace_ui

        with times.phase("trace UI (Phoenix)"):
            ui = start_trace_ui(log=log)
    store = None
    try:
        with times.phase("deployment file"):
            spec = read_launchable(deployment)
        if trace_store:
            with times.phase("trace store"):
                store = TraceStore().start()
                publish_trace_store(store.http_address)

        def publish(status: dict) -> None:  # with where `starmesh status` finds the member certificates
            supervision_file.publish(spec.conductor, status, str(cluster.mesh_dir or ""))

        cluster = Cluster(spec, deployment, trace_store=store.otlp_address if store else "", tls=tls,
                          api_key=api_key, supervision=supervision, on_supervision=publish)
        cluster.start(times)
    except BaseException:
        _stop_store(store)
        if ui is not None:
            ui.stop()
        raise
    return Stack(cluster, store, ui, times)


def publish_trace_store(url: str) -> None:
    """Makes `url` the trace store `starmesh trace` reads by default."""
    cache_root().mkdir(parents=True, exist_ok=True)
    (cache_root() / STORE_FILE).write_text(url)


def published_trace_store() -> str | None:
    """The query URL of the trace store a running `starmesh up` publishes, or None."""
    path = cache_root() / STORE_FILE
    return path.read_text().strip() if path.is_file() else None


def unpublish_trace_store() -> None:
    (cache_root() / STORE_FILE).unlink(missing_ok=True)


def _stop_store(store: TraceStore | None) -> None:
    if store is not None:
        store.stop()
        unpublish_trace_store()
