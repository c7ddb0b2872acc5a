"""A DNS A-record query over UDP to one nameserver, in the standard library only.

The system resolver (getaddrinfo) is what a pod uses; this is for a nameserver named
explicitly (a cluster DNS address, a loopback server in tests), which getaddrinfo
cannot be pointed at. One question, one answer: no recursion, no TCP fallback (a
headless Service's answer fits a UDP datagram for any replica count worth serving).

    query_a("thinker.mesh.svc.cluster.local", ("10.96.0.10", 53)) -> ("10.1.0.7", "10.1.0.9")
"""
from __future__ import annotations

import os
import socket
import struct

TYPE_A, CLASS_IN = 1, 1
_HEADER = struct.Struct("!HHHHHH")  # id, flags, qdcount, ancount, nscount, arcount
_ANSWER = struct.Struct("!HHIH")     # type, class, ttl, rdlength
RCODE_NXDOMAIN = 3


def query_a(name: str, nameserver: tuple[str, int], timeout_s: float = 1.0) -> tuple[str, ...]:
    """The IPv4 addresses `name` has at `nameserver`, sorted; () when it has none
    (NXDOMAIN or an empty answer). OSError when the server does not answer in time or
    answers garbage (the caller keeps its last view then)."""
    query_id = int.from_bytes(os.urandom(2), "big")
    question = _encode_name(name) + struct.pack("!HH", TYPE_A, CLASS_IN)
    packet = _HEADER.pack(query_id, 0x0100, 1, 0, 0, 0) + question  # 0x0100: recursion desired
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout_s)
        sock.sendto(packet, nameserver)
        while True:  # a stray datagram (an old query's late answer) is skipped
            reply, _ = sock.recvfrom(65535)
            if len(reply) >= _HEADER.size and _HEADER.unpack_from(reply)[0] == query_id:
                return _parse_answer(reply)


def _encode_name(name: str) -> bytes:
    labels = [label for label in name.rstrip(".").split(".")]
    if not all(0 < len(label.encode()) < 64 for label in labels):
        raise ValueError(f"dns name {name!r} has an empty or over-long label")
    return b"".join(bytes([len(label.encode())]) + label.encode() for label in labels) + b"\0"


def _skip_name(data: bytes, offset: int) -> int:
    """The offset after the (possibly compressed) name at `offset`."""
    while True:
        if offset >= len(data):
            raise OSError("dns reply: truncated name")
        length = data[offset]
        if length & 0xC0 == 0xC0:  # a pointer ends the name
            return offset + 2
        if length == 0:
            return offset + 1
        offset += 1 + length


def _parse_answer(reply: bytes) -> tuple[str, ...]:
    _id, flags, qdcount, ancount, _ns, _ar = _HEADER.unpack_from(reply)
    rcode = flags & 0xF
    if rcode == RCODE_NXDOMAIN:
        return ()
    if rcode != 0:
        raise OSError(f"dns reply: rcode {rcode}")
    offset = _HEADER.size
    for _ in range(qdcount):
        offset = _skip_name(reply, offset) + 4  # type, class
    addresses = []
    for _ in range(ancount):
        offset = _skip_name(reply, offset)
        if offset + _ANSWER.size > len(reply):
            raise OSError("dns reply: truncated answer")
        rtype, rclass, _ttl, length = _ANSWER.unpack_from(reply, offset)
        offset += _ANSWER.size
        if rtype == TYPE_A and rclass == CLASS_IN and length == 4:
            addresses.append(socket.inet_ntoa(reply[offset:offset + 4]))
        offset += length  # CNAMEs and others: skipped (the A records follow them)
    return tuple(sorted(set(addresses), key=socket.inet_aton))
