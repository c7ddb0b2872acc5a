"""`starmesh status [--deployment FILE]`: each service replica's health, load (KV pool
use, prefix cache, kept contexts and their blocks, queue) and Prometheus /metrics URL
(the conductor's on a last line; as the deployment names them), and, while a `starmesh
up` runs the deployment, what its supervisor saw (restarts, the last exit, a crash loop)."""
from __future__ import annotations

import argparse

from cli.connection_args import add_mesh_tls_arg, add_tls_args, mesh_tls_from_args, tls_from_args


def add_parser(sub) -> None:
    from cluster.deployment_dir import DEFAULT_DEPLOYMENT

    p = sub.add_parser("status", help="health and load of a deployment's services")
    p.add_argument("--deployment", default=str(DEFAULT_DEPLOYMENT), metavar="FILE")
    p.add_argument("--json", action="store_true")
    add_tls_args(p, "the probes (default: the member certificates of the `starmesh up` running the deployment, "
                    "else the deployment's tls)")
    add_mesh_tls_arg(p, "the probes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from cluster import supervision_file
    from cluster.launchable import read_launchable
    from conductor.metrics_address import metrics_url
    from runtime.replica_probe import replica_status

    spec = read_launchable(args.deployment)
    tls = mesh_tls_from_args(args) or tls_from_args(args) or supervision_file.member_tls_of(spec.conductor) or spec.tls
    supervised = {v["address"]: v for v in supervision_file.read(spec.conductor).values()}
    rows = [{"service": s.name, **replica_status(r, tls=tls), "metrics": metrics_url(m),
             **_supervision(supervised.get(r))} for s in spec.services.values() for r, m in zip(s.replicas, s.metrics)]
    if args.json:
        print(json.dumps(rows))
        return 0
    width = max([12] + [len(row["service"]) + 1 for row in rows])  # the names' column
    for row in rows:
        print(_line(row, width))
    url = metrics_url(spec.conductor_metrics)
    print(f"{'conductor':<{width}} {spec.conductor:<22} sessions {_open_sessions(url)} metrics {url or '-'}")
    return 0 if all(r["health"] == "SERVING" for r in rows) else 1


def _open_sessions(url: str) -> str:
    """The conductor's open Sessions streams (its starmesh_sessions_open gauge, every
    model), "-" when its /metrics cannot be read."""
    import urllib.request

    if not url:
        return "-"
    try:
        with urllib.request.urlopen(url, timeout=2.0) as reply:
            text = reply.read().decode()
    except (OSError, ValueError):
        return "-"
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("starmesh_sessions_open{")]
    return str(int(sum(values)))


def _supervision(entry: dict | None) -> dict:
    if entry is None:
        return {}
    return {"restarts": entry["restarts"], "last_exit": entry["last_exit"], "is_crash_loop": entry["is_crash_loop"]}


def _prefix_cache(load: dict) -> str:
    """"cached 12 hit 87% evicted 5" for an engine with a prefix cache, else ""."""
    if "kv_blocks_cached" not in load:
        return ""
    queried = load.get("prefix_lookup_tokens_total", 0)
    hit = f"{100 * load.get('prefix_hit_tokens_total', 0) / queried:.0f}%" if queried else "-"
    return f"cached {int(load['kv_blocks_cached'])} hit {hit} evicted {int(load.get('kv_blocks_evicted_total', 0))}"


def _kept(load: dict) -> str:
    """"contexts 3 (40 blocks)": the contexts a replica keeps for later requests (the
    thinker's, BAGEL's backbone's) and the KV blocks they hold, else ""."""
    if "contexts" not in load:
        return ""
    return f"contexts {int(load['contexts'])} ({int(load.get('context_blocks', 0))} blocks)"


def _line(row: dict, width: int = 12) -> str:
    load = row.get("load") or {}
    kv = (f"kv {int(load['kv_blocks_used'])}/{int(load['kv_blocks_total'])}" if "kv_blocks_used" in load else "")
    queue = f"queued {int(load['queued'])}" if "queued" in load else ""
    restarts = f"restarts {row['restarts']} (last: {row['last_exit']})" if row.get("restarts") else ""
    crash = "CRASH LOOP" if row.get("is_crash_loop") else ""
    metrics = f"metrics {row['metrics']}" if row.get("metrics") else ""
    extra = " ".join(x for x in (kv, _prefix_cache(load), _kept(load), queue, metrics, restarts, crash) if x)
    return (f"{row['service']:<{width}} {row['address']:<22} {row['health']:<8} "
            f"open {row.get('open_requests', '-'):<4} {extra}")
