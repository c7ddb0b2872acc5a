"""Where a deployment's process serves Prometheus /metrics: the address its file names
(`metrics:` per replica, `conductor: {metrics: ...}`), or one derived from its gRPC
address, so that a static scrape config can list every target.

    derived_metrics("127.0.0.1:50061") -> "127.0.0.1:51061"   # port + METRICS_PORT_OFFSET
    derived_metrics("unix:/run/thinker.sock") -> ""            # no port to derive from: none

Why port + 1000: deterministic (the same file gives the same targets on every start),
next to its gRPC port (one address tells the other), and clear of the blocks the shipped
files use (gRPC 500xx, torch rendezvous 29500). A process serves /metrics on the host
it binds for gRPC, so a named metrics address must have its replica's host.
"""
from __future__ import annotations

from core.errors import GraphError

METRICS_PORT_OFFSET = 1000


def derived_metrics(where: str, endpoint: str) -> str:
    """The default metrics address of a gRPC endpoint (module docstring); `where` names
    the process in the error when port + offset is not a port."""
    if endpoint.startswith("unix:"):
        return ""
    host, _, port = endpoint.rpartition(":")
    metrics_port = int(port) + METRICS_PORT_OFFSET
    if metrics_port > 65535:
        raise GraphError(f"{where}: the default metrics port of {endpoint} (port + {METRICS_PORT_OFFSET}) "
                         f"is past 65535; name one with `metrics`")
    return f"{host}:{metrics_port}"


def check_metrics(where: str, endpoint: str, metrics) -> None:
    """`metrics` is "host:port" on `endpoint`'s host (any host for a unix: endpoint), or
    "" (none: only a unix: endpoint's default)."""
    if metrics == "" and endpoint.startswith("unix:"):
        return
    if not isinstance(metrics, str):
        raise GraphError(f"{where}: metrics address {metrics!r} is not a string")
    host, sep, port = metrics.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536) or metrics.startswith("unix:"):
        raise GraphError(f"{where}: metrics address {metrics!r} is not 'host:port'")
    if not endpoint.startswith("unix:"):
        grpc_host = endpoint.rpartition(":")[0]
        if host != grpc_host:
            raise GraphError(f"{where}: metrics address {metrics} must be on the host its process binds "
                             f"({grpc_host}, from {endpoint})")
        if metrics == endpoint:
            raise GraphError(f"{where}: metrics address {metrics} is its gRPC address")


def metrics_url(address: str) -> str:
    """The scrape URL of a metrics address; "" for none."""
    return f"http://{address}/metrics" if address else ""
