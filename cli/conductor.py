"""`starmesh conductor --deployment FILE`: serve the deployment's models (the front door)."""
from __future__ import annotations

import argparse
import os
import sys

from cli.connection_args import (add_api_key_arg, add_mesh_tls_arg, add_tls_args, api_key_from_args,
                                 mesh_tls_from_args, tls_from_args)


def add_parser(sub) -> None:
    p = sub.add_parser("conductor", help="run the conductor for a deployment's models",
                       description="Serve Conductor.Generate for every model of a deployment file.")
    p.add_argument("--deployment", required=True, metavar="FILE")
    p.add_argument("--host", default=None, help="bind address (default: the deployment's conductor host)")
    p.add_argument("--port", type=int, default=None, help="port (default: the deployment's; 0 picks one)")
    p.add_argument("--port-file", metavar="PATH", help="write the bound port here once SERVING")
    p.add_argument("--metrics-port", type=int, metavar="N", help="serve Prometheus /metrics on this port")
    p.add_argument("--run-timeout-s", type=float, default=10.0, metavar="S",
                   help="fail a request a service stopped listing in its heartbeats after S seconds (default 10)")
    limits = p.add_argument_group("input limits", "a request past one is refused alone with INVALID_ARGUMENT "
                                                  "naming the input and the limit")
    limits.add_argument("--max-input-mb", type=float, default=16, metavar="N", help="one input tensor (MiB)")
    limits.add_argument("--max-request-mb", type=float, default=32, metavar="N",
                        help="all of one request's inputs, params and text (MiB)")
    limits.add_argument("--max-input-ids", type=int, default=1 << 18, metavar="N", help="ids in input_ids")
    limits.add_argument("--max-text-kb", type=int, default=2048, metavar="N",
                        help="text, or every message's text, in UTF-8 KiB: counted before anything tokenizes it")
    limits.add_argument("--max-message-mb", type=int, default=64, metavar="N",
                        help="gRPC message limit, receive and send (MiB): a larger message is refused with "
                             "RESOURCE_EXHAUSTED before it is decoded")
    p.add_argument("--log-level", default=os.environ.get("STARMESH_LOG_LEVEL", "INFO"),
                   help="DEBUG also shows third-party progress bars and known-harmless warnings "
                        "(default $STARMESH_LOG_LEVEL, else INFO)")
    add_tls_args(p, "the front door, and the streams to the services without --mesh-tls (default: the "
                    "deployment's tls)")
    add_mesh_tls_arg(p, "the streams to the services and their health watches")
    add_api_key_arg(p, "the token every Conductor call must carry as 'authorization: Bearer KEY'; "
                       "health and reflection need none")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runtime.quiet_logs import configure_logging

    configure_logging(args.log_level)
    from cluster.conductor_process import admission_of, serve_conductor, served_models
    from cluster.launchable import read_launchable
    from core.errors import StarmeshError
    from runtime.server import MiB, ServerConfig

    try:
        spec = read_launchable(args.deployment)
        models = served_models(spec)
        limits = input_limits(args)
        host, _, port = spec.conductor.rpartition(":")
        config = ServerConfig(host=args.host or host, port=int(port) if args.port is None else args.port,
                              tls=tls_from_args(args, spec.tls), max_message_bytes=args.max_message_mb * MiB)
        mesh_tls = mesh_tls_from_args(args)
    except (ValueError, StarmeshError) as e:
        print(f"starmesh conductor: {e}", file=sys.stderr)
        return 2
    if not args.run_timeout_s > 0:
        print(f"starmesh conductor: --run-timeout-s must be > 0, got {args.run_timeout_s}", file=sys.stderr)
        return 2
    serve_conductor(models, config, args.metrics_port, args.port_file, api_key_from_args(args), admission_of(spec),
                    args.run_timeout_s, limits, mesh_tls)
    return 0


def input_limits(args: argparse.Namespace):
    from conductor.input_limits import MiB, InputLimits

    return InputLimits(max_input_bytes=int(args.max_input_mb * MiB), max_request_bytes=int(args.max_request_mb * MiB),
                       max_input_ids=args.max_input_ids, max_text_bytes=args.max_text_kb << 10)
