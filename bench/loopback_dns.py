"""A DNS server on loopback whose A records change while it runs: what a Kubernetes
headless Service looks like to the conductor (one A record per ready pod), for the
dynamic-membership test and benchmark. Built on dnslib (the test extra).

    with LoopbackDns() as dns:
        dns.set("echo.mesh.test", ["127.0.0.2", "127.0.0.3"])
        ... {"dns": "echo.mesh.test:PORT", "nameserver": dns.address} ...
"""
from __future__ import annotations

import threading

from dnslib import QTYPE, RCODE, RR, A
from dnslib.server import BaseResolver, DNSLogger, DNSServer


class _Records(BaseResolver):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.hosts: dict[str, tuple[str, ...]] = {}
        self.num_queries = 0

    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        with self.lock:
            self.num_queries += 1
            hosts = self.hosts.get(name)
        if hosts is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype == QTYPE.A:
            for host in hosts:  # ttl 0: nothing between us and the conductor may cache it
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(host), ttl=0))
        return reply


class LoopbackDns:
    """UDP on 127.0.0.1:<free port>; `address` is "host:port" (a nameserver key)."""

    def __init__(self) -> None:
        self._records = _Records()
        self._server = DNSServer(self._records, address="127.0.0.1", port=0,
                                 logger=DNSLogger(log="-request,-reply,-truncated,-data", prefix=False))
        host, port = self._server.server.server_address
        self.address = f"{host}:{port}"

    def set(self, name: str, hosts) -> None:
        """`name`'s A records from now on (an empty list: the name exists, no address)."""
        with self._records.lock:
            self._records.hosts[name.rstrip(".").lower()] = tuple(hosts)

    @property
    def num_queries(self) -> int:
        with self._records.lock:
            return self._records.num_queries

    def __enter__(self) -> "LoopbackDns":
        self._server.start_thread()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop()
        self._server.server.server_close()
