"""`starmesh serve <component>`: host one component as a gRPC service until SIGTERM
(services.served_component builds it, runtime.serve_component hosts it)."""
from __future__ import annotations

import argparse
import os
import sys

from cli.connection_args import add_mesh_tls_arg, add_tls_args, mesh_tls_from_args, tls_from_args

MiB = 1 << 20


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a component over gRPC",
        description="Serve a registered component, or a 'module:callable' factory returning one.",
    )
    p.add_argument("component", help="registered component name or 'module:callable' factory")
    p.add_argument("--checkpoint", metavar="DIR", help="model checkpoint (Hugging Face layout) for model components")
    p.add_argument("--device", metavar="DEVICE",
                   help="cpu, cuda or cuda:N, passed to the factory as `device` (components that load weights "
                        "onto a device); the same as --option device=DEVICE")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="component option passed to its factory (repeatable; VALUE parsed as JSON when it can be)")
    p.add_argument("--offload", action="append", nargs="?", const="enabled=true", default=[], metavar="KEY=VALUE",
                   help="layerwise offload of the service's block stacks: bare --offload turns it on, KEY=VALUE "
                        "sets an engine.offload.OffloadConfig field (repeatable; see docs/offload.md)")
    g = p.add_argument_group("dlo_group", "a dit replica in a lockstep group: AllGather offload over it "
                                          "(needs --offload use_allgather=true; see docs/offload.md)")
    g.add_argument("--dlo-group", metavar="HOST:PORT", help="the group's rendezvous address (rank 0 binds it)")
    g.add_argument("--dlo-rank", type=int, metavar="R", help="this replica's rank in the group")
    g.add_argument("--dlo-world", type=int, metavar="W", help="the number of replicas in the group")
    g.add_argument("--dlo-name", default="dlo", metavar="NAME", help="the group's name (messages, logs)")
    g.add_argument("--dlo-timeout-s", type=float, default=60.0, metavar="S",
                   help="every collective of the group (and its rendezvous) gives up after this")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    p.add_argument("--port-file", metavar="PATH", help="write the bound port here once SERVING")
    p.add_argument("--host-id", help="transport host id (default $STARMESH_HOST_ID or the hostname)")
    p.add_argument("--transport-mode", choices=("auto", "inline", "shm", "mooncake"), default="auto")
    p.add_argument("--mooncake", action="store_true", help="start a Mooncake transfer engine")
    p.add_argument("--mooncake-hostname", default=os.environ.get("STARMESH_MOONCAKE_HOSTNAME", "127.0.0.1"),
                   metavar="ADDR", help="the address other hosts reach this process's transfer engine at "
                   "(default $STARMESH_MOONCAKE_HOSTNAME or 127.0.0.1; a pod's IP in Kubernetes)")
    p.add_argument("--arena-bytes", type=int, metavar="N", help="size of this process's shm arena")
    p.add_argument("--arena-full-wait-s", type=float, metavar="S",
                   help="how long an output waits for arena space before RESOURCE_EXHAUSTED")
    p.add_argument("--inline-threshold", type=int, metavar="N", help="tensors below N bytes travel inline")
    p.add_argument("--max-message-mb", type=int, default=64, metavar="N", help="gRPC message limit (MiB)")
    p.add_argument("--grace-s", type=float, default=5.0, metavar="S", help="drain time on SIGTERM")
    p.add_argument("--torch-threads", type=int, default=1, metavar="N", help="torch intra-op threads")
    p.add_argument("--nice", type=int, default=0, metavar="N",
                   help="CPU priority increment, 0..19: on a host whose cores a pipeline's services share, "
                        "give the stages further from the client more (docs/scheduling.md)")
    p.add_argument("--metrics-port", type=int, metavar="N", help="serve Prometheus /metrics on this port")
    p.add_argument("--log-level", default=os.environ.get("STARMESH_LOG_LEVEL", "INFO"),
                   help="DEBUG also shows third-party progress bars and known-harmless warnings "
                        "(default $STARMESH_LOG_LEVEL, else INFO)")
    add_tls_args(p, "the service's port and its peer streams (mutual TLS with --tls-ca)")
    add_mesh_tls_arg(p, "the service's port and its peer streams, instead of --tls-*")
    p.set_defaults(func=run)


def _transport_config(args: argparse.Namespace):
    from transport.config import TransportConfig

    kwargs = {"mode": args.transport_mode, "enable_mooncake": args.mooncake,
              "mooncake_hostname": args.mooncake_hostname}
    if args.host_id:
        kwargs["host_id"] = args.host_id
    if args.arena_bytes is not None:
        kwargs["arena_bytes"] = args.arena_bytes
    if args.arena_full_wait_s is not None:
        kwargs["full_wait_s"] = args.arena_full_wait_s
    if args.inline_threshold is not None:
        kwargs["inline_threshold"] = args.inline_threshold
    return TransportConfig(**kwargs)


def _parse_pairs(pairs: list[str], flag: str) -> dict:
    """KEY=VALUE strings -> {KEY: VALUE parsed as JSON when it can be}."""
    import json

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} {pair!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _factory_kwargs(args: argparse.Namespace) -> dict:
    kwargs = {"checkpoint": args.checkpoint} if args.checkpoint else {}
    if getattr(args, "device", None):
        kwargs["device"] = args.device
    kwargs.update(_parse_pairs(args.option, "--option"))
    return kwargs


def _offload_config(args: argparse.Namespace, kwargs: dict):
    """The service's OffloadConfig from `--offload KEY=VALUE` over the factory option
    `offload` (a mapping: how a deployment's options carry it), which is removed from
    kwargs; enabled unless a source says enabled=false. None when neither is given."""
    section = kwargs.pop("offload", None)
    if section is None and not args.offload:
        return None
    if section is not None and not isinstance(section, dict):
        raise ValueError(f"--option offload must be a JSON object, got {section!r}")
    from services.options import offload_config

    return offload_config(section, _parse_pairs(args.offload, "--offload"))


def _dlo_group_config(args: argparse.Namespace, offload):
    """The DloGroupConfig of `--dlo-group/--dlo-rank/--dlo-world` (all three or none);
    the group exists to AllGather offloaded blocks, so it needs offload use_allgather."""
    given = {"--dlo-group": args.dlo_group, "--dlo-rank": args.dlo_rank, "--dlo-world": args.dlo_world}
    if all(v is None for v in given.values()):
        return None
    missing = [flag for flag, v in given.items() if v is None]
    if missing:
        raise ValueError(f"--dlo-group, --dlo-rank and --dlo-world go together (missing {', '.join(missing)})")
    if offload is None or not offload.enabled or not offload.use_allgather:
        raise ValueError("--dlo-group needs --offload use_allgather=true (the group AllGathers the offloaded "
                         "blocks of its replicas)")
    from engine.offload.group import DloGroupConfig

    return DloGroupConfig(args.dlo_group, args.dlo_rank, args.dlo_world, args.dlo_name, args.dlo_timeout_s)


def _server_tls(args: argparse.Namespace):
    """--mesh-tls (a member) or --tls-* (given files), not both; None: plaintext."""
    mesh = mesh_tls_from_args(args)
    if mesh is not None and (args.tls_cert or args.tls_key or args.tls_ca):
        raise ValueError("--mesh-tls and --tls-cert/--tls-key/--tls-ca both set the service's TLS: give one")
    return mesh or tls_from_args(args)


def run(args: argparse.Namespace) -> int:
    from runtime.quiet_logs import configure_logging

    configure_logging(args.log_level)
    from core.errors import StarmeshError
    from runtime.serve_component import serve_component
    from runtime.server import ServerConfig, configure_priority, configure_torch
    from cluster.registry import build_component
    from services.served_component import build_served_component

    try:
        server_config = ServerConfig(host=args.host, port=args.port, max_message_bytes=args.max_message_mb * MiB,
                                     grace_s=args.grace_s, torch_threads=args.torch_threads, nice=args.nice,
                                     tls=_server_tls(args))
    except (ValueError, StarmeshError) as e:
        print(f"starmesh serve: {e}", file=sys.stderr)
        return 2
    transport_config = _transport_config(args)
    configure_priority(server_config.nice)  # before any thread starts
    configure_torch(server_config.torch_threads)  # before the factory loads any weights
    try:
        kwargs = _factory_kwargs(args)
        offload = _offload_config(args, kwargs)
        component = build_served_component(args.component, lambda **kw: build_component(args.component, **kw), kwargs, offload, _dlo_group_config(args, offload))
    except (ValueError, ImportError, StarmeshError) as e:
        print(f"starmesh serve: {e}", file=sys.stderr)
        return 2
    serve_component(component, transport_config, server_config, args.metrics_port, args.port_file)
    return 0
