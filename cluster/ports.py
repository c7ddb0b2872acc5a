"""A deployment's ports checked before anything starts: one already in use is an error
naming the address, never a silent share (every starmesh server binds without
SO_REUSEPORT, so a second server would fail too, later and less clearly)."""
from __future__ import annotations

import errno
import socket


class PortInUse(OSError):
    def __init__(self, name: str, address: str) -> None:
        super().__init__(errno.EADDRINUSE, f"{address} ({name}) is already in use by another process; "
                                           "stop it (a child of an earlier `starmesh up`?) or change the port")
        self.address = address

    def __str__(self) -> str:
        return self.strerror  # without OSError's "[Errno 98]" prefix


def check_free(addresses: dict[str, str]) -> None:
    """addresses: process name -> "host:port". Raises PortInUse for the first taken one.
    Bound with SO_REUSEADDR as the servers are: a port left in TIME_WAIT by a process that
    just stopped is free, one that a live process listens on is not."""
    for name, address in addresses.items():
        host, _, port = address.rpartition(":")
        if int(port) == 0:
            continue
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host.strip("[]"), int(port)))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise PortInUse(name, address) from None
                raise


WILDCARD_HOSTS = {"0.0.0.0", "::", "[::]", ""}


def check_distinct(addresses: dict[str, str]) -> None:
    """addresses: where the file gives it -> "host:port" (Deployment.bound_addresses).
    Two on one port of one host (or of a wildcard host) would fail to bind at start: a
    GraphError naming both, at load. unix: addresses have no port and are skipped."""
    from core.errors import GraphError

    seen: dict[str, list[tuple[str, str]]] = {}  # port -> [(host, where)]
    for where, address in addresses.items():
        if address.startswith("unix:"):
            continue
        host, _, port = address.rpartition(":")
        for other_host, other in seen.get(port, []):
            if host == other_host or host in WILDCARD_HOSTS or other_host in WILDCARD_HOSTS:
                raise GraphError(f"deployment: {where} ({address}) and {other} ({other_host}:{port}) bind the "
                                 "same port; give one another port (a derived metrics port is gRPC port + 1000)")
        seen.setdefault(port, []).append((host, where))
