"""`starmesh health HOST:PORT`: exit 0 only when the service is SERVING (compose health checks)."""
from __future__ import annotations

import argparse
import sys

from cli.connection_args import add_mesh_tls_arg, add_tls_args, mesh_tls_from_args, tls_from_args


def add_parser(sub) -> None:
    p = sub.add_parser("health", help="check a service's gRPC health; exit 0 only when SERVING")
    p.add_argument("address", metavar="HOST:PORT")
    p.add_argument("--service", default="", help="health service name ('' = the whole server)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds before giving up")
    add_tls_args(p, "a TLS service (health needs no API key)")
    add_mesh_tls_arg(p, "a mesh member (a service of `starmesh up`), instead of --tls-*")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.errors import StarmeshError
    from runtime.replica_probe import check_health

    try:
        tls = mesh_tls_from_args(args) or tls_from_args(args)
    except StarmeshError as e:
        print(f"starmesh health: {e}", file=sys.stderr)
        return 2
    health = check_health(args.address, args.service, args.timeout, tls)
    if health.error is not None:
        print(f"{args.address}: {health.status}: {health.error}", file=sys.stderr)
        return 1
    print(health.status)
    return 0 if health.is_serving else 1
