"""The TLS and token flags, the same on every command that serves or calls:

    --tls-cert FILE --tls-key FILE   this process's certificate and key (PEM)
    --tls-ca FILE                    the CA peers are checked against (mutual TLS on servers)
    --mesh-tls DIR                   a mesh member's files (cluster/mesh_ca.py): mutual TLS with members only
    --api-key KEY                    the front door's token (default $STARMESH_API_KEY)

    --conductor HOST:PORT            the conductor (default $STARMESH_CONDUCTOR, else 127.0.0.1:50050)
    --timeout S                      deadline of the whole request in seconds

`add_tls_args` on servers (`serve`, `conductor`, `up`) and probes (`health`, `status`);
`add_mesh_tls_arg` on the processes that talk to services (`serve`, `conductor`) and probes;
`add_client_args` (--conductor, --timeout, TLS, --api-key) on every command that calls a
conductor (`speak`, `imagine`, `rollout`, `plan`), which open their channels through
`connection_from_args` (client.connection.Connection).
"""
from __future__ import annotations

import argparse
import os

from core.bearer import API_KEY_ENV

CONDUCTOR_ENV = "STARMESH_CONDUCTOR"
DEFAULT_CONDUCTOR = "127.0.0.1:50050"


def add_tls_args(p: argparse.ArgumentParser, purpose: str) -> None:
    g = p.add_argument_group("TLS", f"certificate files (PEM) for {purpose}; none: plaintext")
    g.add_argument("--tls-cert", metavar="FILE", help="this process's certificate chain")
    g.add_argument("--tls-key", metavar="FILE", help="the certificate's private key")
    g.add_argument("--tls-ca", metavar="FILE", help="the CA that peers' certificates are checked against "
                                                    "(servers then require client certificates: mutual TLS)")


def add_mesh_tls_arg(p: argparse.ArgumentParser, purpose: str) -> None:
    p.add_argument("--mesh-tls", metavar="DIR", help=f"{purpose}: the mesh member's CA and certificate in DIR "
                                                     "(ca.pem, member.pem, member.key; `starmesh up` makes them)")


def mesh_tls_from_args(args: argparse.Namespace):
    """The member runtime.tls.TlsConfig of --mesh-tls, or None (InvalidArgument naming a bad file)."""
    from runtime.tls import member_tls

    return member_tls(args.mesh_tls) if args.mesh_tls else None


def add_api_key_arg(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--api-key", default=None, metavar="KEY", help=f"{help_text} (default ${API_KEY_ENV})")


def add_conductor_args(p, aliases: tuple[str, ...] = (), timeout_s: float | None = None) -> None:
    """--conductor (and `aliases`, older names of it) and --timeout (default `timeout_s`; None: no deadline)."""
    p.add_argument("--conductor", *aliases, dest="conductor", metavar="HOST:PORT",
                   help=f"the conductor (default ${CONDUCTOR_ENV} or {DEFAULT_CONDUCTOR})")
    default = "none" if timeout_s is None else f"{timeout_s:g}"
    p.add_argument("--timeout", type=float, default=timeout_s, metavar="S",
                   help=f"deadline of the whole request in seconds (default {default})")


def conductor_address(args: argparse.Namespace) -> str:
    return args.conductor or os.environ.get(CONDUCTOR_ENV) or DEFAULT_CONDUCTOR


def add_client_args(p: argparse.ArgumentParser, aliases: tuple[str, ...] = (), timeout_s: float | None = None) -> None:
    add_conductor_args(p, aliases, timeout_s)
    add_tls_args(p, "the connection to the conductor (--tls-ca to check it, --tls-cert/--tls-key for mutual TLS)")
    add_api_key_arg(p, "the conductor's API key, sent as 'authorization: Bearer KEY'")


def api_key_from_args(args: argparse.Namespace) -> str:
    return os.environ.get(API_KEY_ENV, "") if args.api_key is None else args.api_key


def tls_from_args(args: argparse.Namespace, default=None):
    """The flags' runtime.tls.TlsConfig; `default` (a deployment's) when none is given.
    Raises core.errors.InvalidArgument naming the flag of a missing or unreadable file."""
    from runtime.tls import tls_config

    return tls_config(args.tls_cert or "", args.tls_key or "", args.tls_ca or "") or default


def connection_from_args(args: argparse.Namespace, address: str | None = None):
    """The client.connection.Connection to the conductor the flags describe (at `address`
    when given)."""
    from client.connection import Connection

    return Connection(address or conductor_address(args), api_key_from_args(args), tls_from_args(args))
