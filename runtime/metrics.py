"""Prometheus metrics of one process (`--metrics-port`): text exposition over HTTP.

Every process's registry holds the standard collectors (`process_*`: CPU, memory, file
descriptors, start time; `python_info`; `python_gc_*`) beside its own families. A
service exports its component's load (Component.load(), typed by
runtime/load_families.py), its open requests, the messages queued for its engine
thread, the engine's busy time in steps (its rate is the step utilisation an
autoscaler reads) and its arena leases, read at scrape time.
The conductor's request metrics live in conductor/metrics.py. Each process builds its
own registry (no process-global state, so tests can hold several).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from runtime.load_families import load_family


def process_registry() -> CollectorRegistry:
    """A new registry with the standard process and Python collectors registered."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class ServiceCollector:
    """Reads the hosted component and transport when Prometheus scrapes."""

    def __init__(self, name: str, component, step_loop, transport) -> None:
        self.name, self.component, self.step_loop, self.transport = name, component, step_loop, transport

    def collect(self):
        labels = ["service"]
        open_requests = GaugeMetricFamily("starmesh_open_requests", "requests with state on this replica",
                                          labels=labels)
        open_requests.add_metric([self.name], self.step_loop.num_open_requests)
        yield open_requests
        queued = GaugeMetricFamily("starmesh_engine_queued", "messages waiting for the engine thread",
                                   labels=labels)
        queued.add_metric([self.name], self.step_loop.num_queued)
        yield queued
        busy = CounterMetricFamily("starmesh_step_busy_seconds", "engine time spent in component steps",
                                   labels=labels)
        busy.add_metric([self.name], self.step_loop.busy_s)
        yield busy
        steps = CounterMetricFamily("starmesh_steps", "component steps taken", labels=labels)
        steps.add_metric([self.name], self.step_loop.num_steps)
        yield steps
        leases = GaugeMetricFamily("starmesh_arena_leases", "live leases of this process's arena", labels=labels)
        leases.add_metric([self.name], self.transport.stats().get("num_leases", 0))
        yield leases
        load = getattr(self.component, "load", None)
        for key, value in (load() if load is not None else {}).items():
            family = load_family(key)
            if family.kind == "counter":  # CounterMetricFamily appends the _total itself
                metric = CounterMetricFamily(family.name[:-len("_total")], family.help, labels=labels)
            else:
                metric = GaugeMetricFamily(family.name, family.help, labels=labels)
            metric.add_metric([self.name], float(value))
            yield metric


def serve_metrics(port: int, registry: CollectorRegistry, host: str = "127.0.0.1"):
    """Starts the exposition server on a daemon thread; returns (server, thread). A port
    in use is an OSError naming the address."""
    try:
        return start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise OSError(e.errno, f"metrics: could not bind {host}:{port}: {e.strerror}") from e
