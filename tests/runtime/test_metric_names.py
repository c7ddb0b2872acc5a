"""Metric names pass the conventions `promtool check metrics` lints: every load key a
component reports, typed by runtime/load_families.py, scraped from a real service's
/metrics with the standard process and Python collectors; the checker itself names
each convention a bad exposition breaks (so a clean scrape means something)."""
from __future__ import annotations

import pytest
import torch

from cluster.launcher import free_port
from runtime.load_families import FAMILIES, LoadFamily, load_family
from runtime.metrics import ServiceCollector, process_registry, serve_metrics
from runtime.items import OpenNode
from tests.fixtures.components import Echo, inline_ref
from tests.fixtures.exposition_lint import lint, promtool_problems, scrape
from tests.fixtures.services import RunStream, start_in_process

pytestmark = pytest.mark.timeout(60)

UNKNOWN = {"new_thing": 1, "spares_total": 4, "odd-key": 2}  # keys a new component might report


class Loaded(Echo):
    def load(self) -> dict:
        return {**{key: i for i, key in enumerate(FAMILIES)}, **UNKNOWN}


def test_a_services_metrics_pass_the_lints_with_the_standard_collectors():
    server = start_in_process(Loaded())
    service = server.hosted
    with RunStream(server.address) as stream:  # one step: the engine's busy time grows
        stream.send(OpenNode(request_id="m", node="echo", inputs={"x": inline_ref(torch.ones(2))}))
        stream.events()
    registry = process_registry()
    registry.register(ServiceCollector("loaded", service.component, service.step_loop, service.transport))
    port = free_port()
    http, _ = serve_metrics(port, registry)
    try:
        text = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        http.shutdown()
        server.stop()
    assert lint(text) == []
    assert promtool_problems(text) == ""
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "python_info", "python_gc_collections_total", "starmesh_kv_blocks_capacity",
                 "starmesh_lockstep_rounds_total", "starmesh_new_thing", "starmesh_spares_total_value",
                 "starmesh_odd_key", "starmesh_open_requests", "starmesh_engine_queued",
                 "starmesh_step_busy_seconds_total", "starmesh_steps_total"):
        assert f"\n{name}" in text, name
    steps = next(ln for ln in text.splitlines() if ln.startswith("starmesh_steps_total{"))
    assert float(steps.split()[-1]) >= 1
    assert "starmesh_kv_blocks_total" not in text


def test_every_family_is_typed_by_its_name():
    for key, family in FAMILIES.items():
        assert family.name.startswith("starmesh_"), key
        assert (family.kind == "counter") == family.name.endswith("_total"), key
    assert load_family("kv_blocks_total").name == "starmesh_kv_blocks_capacity"
    with pytest.raises(ValueError, match="LoadFamily.name"):
        LoadFamily("starmesh_blocks_total", "gauge", "a gauge with a counter's suffix")


BAD = """\
# HELP starmesh_kv_blocks_total KV blocks
# TYPE starmesh_kv_blocks_total gauge
starmesh_kv_blocks_total{service="t"} 512
# HELP starmesh_rounds rounds
# TYPE starmesh_rounds counter
starmesh_rounds 3
# HELP starmesh_latency_ms latency
# HELP starmesh_latency_ms latency again
# TYPE starmesh_latency_ms histogram
starmesh_latency_ms_bucket{le="1.0"} 2
starmesh_latency_ms_bucket{le="2.0"} 1
starmesh_latency_ms_count 2
starmesh_latency_ms_sum 1.5
# TYPE starmesh_open gauge
starmesh_open{Service="t",le="1"} 1
starmesh_open{Service="t",le="1"} 1
"""


def test_the_checker_names_each_broken_convention():
    problems = "\n".join(lint(BAD))
    for expected in ("starmesh_kv_blocks_total: non-counter metrics should not have a _total suffix",
                     "starmesh_rounds: counter metrics should have a _total suffix",
                     "starmesh_latency_ms: second HELP line",
                     "starmesh_latency_ms: use base units (seconds, bytes), not 'ms'",
                     "no +Inf bucket", "bucket counts are not cumulative",
                     "starmesh_open: no HELP text", "label name 'Service'", "label 'le' is reserved",
                     "sample given 2 times"):
        assert expected in problems, expected
