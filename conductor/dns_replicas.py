"""A service whose replicas are what a DNS name resolves to, re-read every `refresh_s`.

A Kubernetes headless Service answers with one A record per ready pod; A records carry
no port, so every replica serves on the one `port`. In a deployment file::

    services:
      thinker:
        replicas: {dns: "thinker.mesh.svc.cluster.local:50061", refresh_s: 2}
        # optional: nameserver: "10.96.0.10:53" asks that server over UDP instead of
        # the system resolver (what the pod's /etc/resolv.conf names)

`resolve()` gives the endpoints ("ip:port", sorted) the name has now; the conductor's
conductor/membership.py turns changes between two answers into joins and leaves.
"""
from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from conductor.dns_query import query_a
from core.errors import GraphError

DNS_KEYS = {"dns", "refresh_s", "nameserver"}


def _host_port(where: str, key: str, value) -> tuple[str, int]:
    if not isinstance(value, str):
        raise GraphError(f"{where}.{key} must be 'host:port', got {value!r}")
    host, sep, port = value.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise GraphError(f"{where}.{key} must be 'host:port' (port 1..65535), got {value!r}")
    return host, int(port)


@dataclass(frozen=True)
class DnsReplicas:
    """dns: "name:port" (the name's A records are the replicas' hosts); refresh_s: how
    often it is resolved again (> 0); nameserver: "host:port" of the DNS server to ask,
    "" for the system resolver. where: the key path errors name."""

    dns: str
    refresh_s: float = 2.0
    nameserver: str = ""
    where: str = "replicas"

    def __post_init__(self) -> None:
        _host_port(self.where, "dns", self.dns)
        if isinstance(self.refresh_s, bool) or not isinstance(self.refresh_s, (int, float)) or self.refresh_s <= 0:
            raise GraphError(f"{self.where}.refresh_s must be a number > 0, got {self.refresh_s!r}")
        object.__setattr__(self, "refresh_s", float(self.refresh_s))
        if not isinstance(self.nameserver, str):
            raise GraphError(f"{self.where}.nameserver must be 'host:port', got {self.nameserver!r}")
        if self.nameserver:
            _host_port(self.where, "nameserver", self.nameserver)

    @property
    def name(self) -> str:
        return self.dns.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.dns.rpartition(":")[2])

    async def resolve(self) -> tuple[str, ...]:
        """The endpoints the name resolves to now (sorted "ip:port"). OSError when the
        resolver fails (not the same as an empty answer: the caller keeps its view)."""
        if self.nameserver:
            server = _host_port(self.where, "nameserver", self.nameserver)
            hosts = await asyncio.to_thread(query_a, self.name, server)
        else:
            hosts = await _system_resolve(self.name, self.port)
        return tuple(f"{host}:{self.port}" for host in hosts)


async def _system_resolve(name: str, port: int) -> tuple[str, ...]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(name, port, family=socket.AF_INET,
                                                             type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
            return ()  # no pod is ready: the name has no address
        raise OSError(f"resolving {name}: {e}") from e
    return tuple(sorted({info[4][0] for info in infos}, key=socket.inet_aton))
