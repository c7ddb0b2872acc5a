"""`starmesh health HOST:PORT`: exit 0 only when the service is SERVING (compose health checks)."""
from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("health", help="check a service's gRPC health; exit 0 only when SERVING")
    p.add_argument("address", metavar="HOST:PORT")
    p.add_argument("--service", default="", help="health service name ('' = the whole server)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds before giving up")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runtime.replica_probe import check_health

    health = check_health(args.address, args.service, args.timeout)
    if health.error is not None:
        print(f"{args.address}: {health.status}: {health.error}", file=sys.stderr)
        return 1
    print(health.status)
    return 0 if health.is_serving else 1
