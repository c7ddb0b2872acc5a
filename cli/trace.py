"""`starmesh trace REQUEST_ID`: the request's per-edge latency table from the trace store."""
from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("trace", help="per-edge latency of one request, from the local trace store")
    p.add_argument("request_id")
    p.add_argument("--store", help="trace store query URL (default: the one `starmesh up` runs)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def print_edges(rows: list[dict]) -> None:
    """wait: the p50 of the part spent in the consumer's runtime (arrival -> dispatch);
    '-' where the edge did not cross processes or its consumer is the conductor."""
    print(f"{'edge':<44} {'items':>6} {'bytes':>10} {'p50 ms':>8} {'max ms':>8} {'wait ms':>8}  transport")
    for r in rows:
        wait = f"{r['wait_p50_us'] / 1e3:>8.2f}" if "wait_p50_us" in r else f"{'-':>8}"
        print(f"{r['edge']:<44} {r['items']:>6} {r['bytes']:>10} {r.get('p50_us', 0) / 1e3:>8.2f} "
              f"{r.get('max_us', 0) / 1e3:>8.2f} {wait}  {r['transport']}")


def run(args: argparse.Namespace) -> int:
    import json

    from cluster.stack import published_trace_store
    from cluster.trace_store import edge_table, fetch_request

    store = args.store or published_trace_store()
    if not store:
        print("starmesh trace: no trace store (is `starmesh up` running? or pass --store URL)", file=sys.stderr)
        return 2
    try:
        data = fetch_request(store, args.request_id)
    except OSError as e:
        print(f"starmesh trace: cannot read {store}: {e}", file=sys.stderr)
        return 2
    if not data["spans"]:
        print(f"starmesh trace: no spans for request {args.request_id!r} (yet)", file=sys.stderr)
        return 1
    rows = edge_table(data["spans"])
    if args.json:
        print(json.dumps({"trace_ids": data["trace_ids"], "edges": rows}))
    else:
        print(f"trace {', '.join(data['trace_ids'])}: {len(data['spans'])} spans")
        print_edges(rows)
    return 0
