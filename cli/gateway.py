"""`starmesh gateway`: the OpenAI-compatible HTTP front door of a conductor.

    starmesh gateway --conductor 127.0.0.1:50050 --host 127.0.0.1 --port 8000

POST /v1/audio/speech, /v1/chat/completions, /v1/images/generations; GET /v1/models,
/health, /metrics (docs/gateway.md). Callers' `Authorization: Bearer KEY` headers go to
the conductor, which checks them; the TLS flags are the gateway's certificate towards a
TLS mesh (its conductor). Stops on SIGTERM / Ctrl-C after open responses finish (--grace-s).
"""
from __future__ import annotations

import argparse
import sys

from cli.connection_args import add_conductor_args, add_tls_args, conductor_address, tls_from_args


def add_parser(sub) -> None:
    p = sub.add_parser("gateway", help="serve the OpenAI-compatible HTTP API in front of a conductor",
                       description="An OpenAI-compatible HTTP server translating to a conductor's gRPC API.")
    add_conductor_args(p, timeout_s=600.0)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free one)")
    p.add_argument("--port-file", metavar="PATH", help="write the bound port here once it accepts connections")
    p.add_argument("--max-body-mb", type=float, default=32.0,
                   help="largest request body, whatever its framing (default 32 MiB; 413 past it)")
    p.add_argument("--max-bodies-in-flight-mb", type=float,
                   help="bytes of request bodies held at once, all connections together (default 64 MiB, or "
                        "--max-body-mb when larger; 429 past it)")
    p.add_argument("--body-timeout-s", type=float, default=120.0,
                   help="how long a request body may take to arrive whole (default 120 s; 408 past it)")
    p.add_argument("--grace-s", type=float, default=10.0,
                   help="on SIGTERM, how long open responses may finish (default 10 s)")
    p.add_argument("--realtime-send-queue-mb", type=float, default=8.0,
                   help="/v1/realtime: events queued for a client that does not read before it is disconnected "
                        "(default 8 MiB)")
    add_tls_args(p, "the connection to the conductor (--tls-ca to check it, --tls-cert/--tls-key for mutual TLS)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from client.connection import Connection
    from core.errors import StarmeshError
    from gateway.config import GatewayConfig
    from gateway.realtime_config import RealtimeConfig
    from gateway.server import serve

    try:
        in_flight_mb = args.max_bodies_in_flight_mb
        in_flight_mb = max(64.0, args.max_body_mb) if in_flight_mb is None else in_flight_mb
        realtime = RealtimeConfig(max_send_queue_bytes=int(args.realtime_send_queue_mb * (1 << 20)))
        config = GatewayConfig(args.host, args.port, args.timeout, int(args.max_body_mb * (1 << 20)), args.grace_s,
                               int(in_flight_mb * (1 << 20)), args.body_timeout_s, realtime)
        connection = Connection(conductor_address(args), "", tls_from_args(args))
    except (ValueError, StarmeshError) as e:
        print(f"starmesh gateway: {e}", file=sys.stderr)
        return 2

    def ready(port: int) -> None:
        if args.port_file:
            from runtime.process import write_port_file

            write_port_file(args.port_file, port)
        print(f"starmesh gateway: http://{args.host}:{port} -> conductor {connection.address}", flush=True)

    try:
        serve(connection, config, ready)
    except OSError as e:
        print(f"starmesh gateway: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    return 0
