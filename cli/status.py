"""`starmesh status [--deployment FILE]`: each service replica's health and load."""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    from cli.up import DEFAULT_DEPLOYMENT

    p = sub.add_parser("status", help="health and load of a deployment's services")
    p.add_argument("--deployment", default=str(DEFAULT_DEPLOYMENT), metavar="FILE")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def replica_status(address: str) -> dict:
    import grpc

    from protos.starmesh.v1 import component_pb2, component_pb2_grpc

    try:
        with grpc.insecure_channel(address) as channel:
            info = component_pb2_grpc.ComponentStub(channel).Describe(component_pb2.DescribeRequest(), timeout=3)
    except grpc.RpcError as e:
        return {"address": address, "health": "DOWN", "error": e.code().name}
    return {"address": address, "health": "SERVING", "open_requests": info.num_open_requests,
            "leases": info.transport.num_leases, "load": {k: v for k, v in info.load.items()}}


def run(args: argparse.Namespace) -> int:
    import json

    from cluster.spec import ClusterSpec

    spec = ClusterSpec.load(args.deployment)
    rows = [{"service": s.name, **replica_status(r)} for s in spec.services.values() for r in s.replicas]
    if args.json:
        print(json.dumps(rows))
        return 0
    for row in rows:
        load = row.get("load") or {}
        kv = (f"kv {int(load['kv_blocks_used'])}/{int(load['kv_blocks_total'])}" if "kv_blocks_used" in load else "")
        queue = f"queued {int(load['queued'])}" if "queued" in load else ""
        extra = " ".join(x for x in (kv, queue) if x)
        print(f"{row['service']:<12} {row['address']:<22} {row['health']:<8} "
              f"open {row.get('open_requests', '-'):<4} {extra}")
    return 0 if all(r["health"] == "SERVING" for r in rows) else 1
