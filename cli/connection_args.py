"""The TLS and token flags, the same on every command that serves or calls:

    --tls-cert FILE --tls-key FILE   this process's certificate and key (PEM)
    --tls-ca FILE                    the CA peers are checked against (mutual TLS on servers)
    --api-key KEY                    the front door's token (default $STARMESH_API_KEY)

`add_tls_args` on servers (`serve`, `conductor`, `up`) and probes (`health`, `status`);
`add_client_args` (TLS + --api-key) on the commands that call a conductor, which open
their channels through `connection_from_args` (client.connection.Connection).
"""
from __future__ import annotations

import argparse
import os

from core.bearer import API_KEY_ENV


def add_tls_args(p: argparse.ArgumentParser, purpose: str) -> None:
    g = p.add_argument_group("TLS", f"certificate files (PEM) for {purpose}; none: plaintext")
    g.add_argument("--tls-cert", metavar="FILE", help="this process's certificate chain")
    g.add_argument("--tls-key", metavar="FILE", help="the certificate's private key")
    g.add_argument("--tls-ca", metavar="FILE", help="the CA that peers' certificates are checked against "
                                                    "(servers then require client certificates: mutual TLS)")


def add_api_key_arg(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("--api-key", default=None, metavar="KEY", help=f"{help_text} (default ${API_KEY_ENV})")


def add_client_args(p: argparse.ArgumentParser) -> None:
    add_tls_args(p, "the connection to the conductor (--tls-ca to check it, --tls-cert/--tls-key for mutual TLS)")
    add_api_key_arg(p, "the conductor's API key, sent as 'authorization: Bearer KEY'")


def api_key_from_args(args: argparse.Namespace) -> str:
    return os.environ.get(API_KEY_ENV, "") if args.api_key is None else args.api_key


def tls_from_args(args: argparse.Namespace, default=None):
    """The flags' runtime.tls.TlsConfig; `default` (a deployment's) when none is given.
    Raises core.errors.InvalidArgument naming the flag of a missing or unreadable file."""
    from runtime.tls import tls_config

    return tls_config(args.tls_cert or "", args.tls_key or "", args.tls_ca or "") or default


def connection_from_args(args: argparse.Namespace, address: str):
    """The client.connection.Connection to the conductor at `address` the flags describe."""
    from client.connection import Connection

    return Connection(address, api_key_from_args(args), tls_from_args(args))
