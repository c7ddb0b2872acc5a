"""The starmesh Grafana dashboard, defined here and written as
compose/grafana/dashboards/starmesh.json (which tests/cluster/test_dashboards.py keeps
equal to this, checks every query of with promtool, and checks against the metric
families a live tiny mesh declares):

    python -m cluster.grafana_dashboard -o compose/grafana/dashboards/starmesh.json

Rows: speech, requests, images, admission, engines, edges, gateway, processes. Queries
use the series the processes export (docs/operations.md, docs/scheduling.md) and the
`process` / `role` target labels of cluster/prometheus_config.py only in legends, so
they also work under a scrape config without them. `$__rate_interval` and `$model` are
Grafana's: the rate window it picks from the scrape interval, and the model filter.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

RATE = "[$__rate_interval]"
MODEL = 'model=~"$model"'


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    description: str = ""


def quantiles(metric: str, by: str, where: str = "", legend: str = "") -> tuple[tuple[str, str], ...]:
    """p50 and p99 of histogram `metric` (its name without _bucket) per `by` labels."""
    selector = f"{metric}_bucket{{{where}}}" if where else f"{metric}_bucket"
    return tuple((f"histogram_quantile({q}, sum by (le, {by}) (rate({selector}{RATE})))",
                  f"{legend or '{{' + by + '}}'} p{int(q * 100)}") for q in (0.5, 0.99))


def per_second(metric: str, by: str, where: str = "", legend: str = "") -> tuple[str, str]:
    selector = f"{metric}{{{where}}}" if where else metric
    return f"sum by ({by}) (rate({selector}{RATE}))", legend or " ".join("{{%s}}" % b.strip() for b in by.split(","))


SERVICE = "{{service}} {{instance}}"  # a service replica: its component and its address

ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("Speech", (
        Panel("Time to first audio", "s", quantiles("starmesh_ttfa_seconds", "model", MODEL),
              "Request start to its first audio chunk leaving the conductor."),
        Panel("Real-time factor", "none", quantiles("starmesh_rtf_ratio", "model", MODEL),
              "Wall seconds per audio second; below 1 the stream keeps ahead of playback."),
        Panel("Underrun seconds per audio request", "s", (
            (f"sum by (model) (rate(starmesh_underrun_seconds_sum{{{MODEL}}}{RATE})) / "
             f"sum by (model) (rate(starmesh_underrun_seconds_count{{{MODEL}}}{RATE}))", "{{model}} mean"),
            quantiles("starmesh_underrun_seconds", "model", MODEL)[1]),
            "Playback stall per request, on the client clock the conductor sends at."),
        Panel("Stalls per second", "none", (per_second("starmesh_underruns_total", "model", MODEL),)),
        Panel("Continuity", "percentunit", (
            (f'sum by (model) (rate(starmesh_audio_streams_total{{{MODEL}, continuity="continuous"}}{RATE})) / '
             f"sum by (model) (rate(starmesh_audio_streams_total{{{MODEL}}}{RATE}))", "{{model}}"),),
            "Share of audio streams that never stalled."),
    )),
    ("Requests", (
        Panel("Requests per second by outcome", "reqps",
              (per_second("starmesh_requests_total", "model, outcome", MODEL),)),
        Panel("Requests in flight", "none", (("sum by (model) (starmesh_requests_in_flight{%s})" % MODEL,
                                               "{{model}}"),)),
    )),
    ("Images", (
        Panel("Image latency", "s", quantiles("starmesh_image_latency_seconds", "model", MODEL)),
        Panel("Denoising steps per second", "none",
              (per_second("starmesh_steps_total", "service, instance", 'service="dit"', SERVICE),),
              "Steps of the dit replicas' engines (one step advances every image in its batch)."),
    )),
    ("Admission", (
        Panel("Waiting for admission", "none", (("sum by (model) (starmesh_admission_waiting{%s})" % MODEL,
                                                  "{{model}}"),)),
        Panel("Admitted and refused per second", "reqps", (
            per_second("starmesh_admission_admitted_total", "model", MODEL, "{{model}} admitted"),
            per_second("starmesh_admission_refused_total", "model", MODEL, "{{model}} refused"))),
        Panel("Admission wait", "s", quantiles("starmesh_admission_wait_seconds", "model", MODEL)),
    )),
    ("Engines", (
        Panel("KV-cache use", "percentunit", (("starmesh_kv_blocks_used / starmesh_kv_blocks_capacity", SERVICE),),
              "Blocks in use over the pool's capacity, per KV-cache engine."),
        Panel("Queues", "none", (("starmesh_requests_waiting", SERVICE + " waiting"),
                                 ("starmesh_work_items_queued", SERVICE + " items queued"),
                                 ("starmesh_engine_queued", SERVICE + " messages for the engine"))),
        Panel("Step utilisation", "percentunit", ((f"rate(starmesh_step_busy_seconds_total{RATE})", SERVICE),),
              "Share of wall time the engine thread spends in component steps."),
        Panel("Running and open requests", "none", (("starmesh_requests_running", SERVICE + " running"),
                                                    ("starmesh_open_requests", SERVICE + " open"))),
    )),
    ("Edges", (
        Panel("Edge latency p50", "s", (quantiles("starmesh_edge_latency_seconds", "edge", MODEL)[0],),
              "Production to dispatch, per hop or chunk of each streamed edge."),
        Panel("Edge latency p99", "s", (quantiles("starmesh_edge_latency_seconds", "edge", MODEL)[1],)),
    )),
    ("Gateway", (
        Panel("HTTP requests per second", "reqps", (per_second("starmesh_gateway_requests_total", "route, status"),)),
        Panel("Status codes", "reqps", (per_second("starmesh_gateway_requests_total", "status"),)),
        Panel("Time to first byte", "s", quantiles("starmesh_gateway_first_byte_seconds", "route")),
        Panel("Request latency", "s", quantiles("starmesh_gateway_request_seconds", "route")),
        Panel("In flight and client disconnects", "none", (
            ("sum by (route) (starmesh_gateway_requests_in_flight)", "{{route}} in flight"),
            per_second("starmesh_gateway_client_disconnects_total", "route", legend="{{route}} disconnects/s"))),
    )),
    ("Processes", (
        Panel("CPU", "percentunit", ((f"rate(process_cpu_seconds_total{RATE})", "{{process}} {{instance}}"),)),
        Panel("Resident memory", "bytes", (("process_resident_memory_bytes", "{{process}} {{instance}}"),)),
    )),
)


def queries() -> list[str]:
    """Every PromQL expression of the dashboard, panels in order."""
    return [expr for _, panels in ROWS for panel in panels for expr, _ in panel.targets]


def dashboard() -> dict:
    panels, y, next_id = [], 0, 1
    for title, row in ROWS:
        panels.append({"type": "row", "id": next_id, "title": title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        next_id, y = next_id + 1, y + 1
        for i, panel in enumerate(row):
            grid = {"h": 8, "w": 8, "x": 8 * (i % 3), "y": y + 8 * (i // 3)}
            panels.append(_timeseries(panel, next_id, grid))
            next_id += 1
        y += 8 * ((len(row) + 2) // 3)
    return {"uid": "starmesh", "title": "starmesh", "tags": ["starmesh"], "editable": True, "schemaVersion": 39,
            "version": 1, "refresh": "10s", "time": {"from": "now-30m", "to": "now"}, "timezone": "",
            "description": "Speech, images, admission, engines, edges and the gateway of a starmesh mesh.",
            "annotations": {"list": []}, "templating": {"list": _variables()}, "panels": panels}


DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _timeseries(panel: Panel, panel_id: int, grid: dict) -> dict:
    targets = [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend,
                "range": True} for i, (expr, legend) in enumerate(panel.targets)]
    return {"type": "timeseries", "id": panel_id, "title": panel.title, "description": panel.description,
            "datasource": DATASOURCE, "gridPos": grid, "targets": targets,
            "fieldConfig": {"defaults": {"unit": panel.unit, "min": 0}, "overrides": []},
            "options": {"legend": {"showLegend": True, "displayMode": "list", "placement": "bottom", "calcs": []},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


MODEL_VARIABLE_METRIC = "starmesh_requests_total"


def _variables() -> list[dict]:
    model_query = f"label_values({MODEL_VARIABLE_METRIC}, model)"
    return [{"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus",
             "current": {"text": "Prometheus", "value": "prometheus"}, "hide": 0},
            {"type": "query", "name": "model", "label": "model", "datasource": DATASOURCE, "refresh": 2,
             "query": {"query": model_query, "refId": "model"}, "definition": model_query,
             "multi": True, "includeAll": True, "allValue": ".*", "sort": 1,
             "current": {"text": "All", "value": "$__all"}, "hide": 0}]


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.grafana_dashboard",
                                description="Print (or write) the starmesh Grafana dashboard JSON.")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    args = p.parse_args(argv)
    if args.output:
        with open(args.output, "w") as f:
            f.write(render())
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
