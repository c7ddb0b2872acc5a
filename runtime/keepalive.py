"""HTTP/2 keepalive for the mesh's long-lived streams (Run streams, peer links, health
watches): a peer that stops answering breaks them within seconds, whatever the stream
carries.

A stopped process (SIGSTOP, a machine that froze) keeps its TCP connections open: the
kernel still acknowledges, so a stream to it neither ends nor errs, it just stays quiet.
HTTP/2 pings are answered by gRPC's own threads, not by the Python event loop or an engine
thread, so a busy process (a long engine step, a loop stalled by one request, a loaded
machine) answers them in milliseconds and only a process that cannot run at all misses
them.

- CHANNEL_OPTIONS (every channel of the mesh): a ping after CHANNEL_PING_S without data
  from the peer, also on an idle watch; no answer within PING_TIMEOUT_S breaks the
  connection and every stream on it (UNAVAILABLE). A stopped peer is found within
  CHANNEL_PING_S + PING_TIMEOUT_S.
- SERVER_OPTIONS (every server): accepts those pings (one every MIN_PING_INTERVAL_S at
  most, well under what channels send, so a server never answers GOAWAY too_many_pings),
  and pings its own clients every SERVER_PING_S, so a stopped client's streams end too
  and the requests they carried are freed.

gRPC reads `grpc.http2.ping_timeout_ms` for the ping's deadline (its default is a
minute); `grpc.keepalive_timeout_ms` is set alike for the versions that read that one.
"""
from __future__ import annotations

CHANNEL_PING_S = 1.0
PING_TIMEOUT_S = 2.0
SERVER_PING_S = 10.0  # a server's clients may be far (the conductor's port): generous
SERVER_PING_TIMEOUT_S = 10.0
MIN_PING_INTERVAL_S = 0.5  # < CHANNEL_PING_S: a channel's pings never count as abuse


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", _ms(CHANNEL_PING_S)),
    ("grpc.keepalive_timeout_ms", _ms(PING_TIMEOUT_S)),
    ("grpc.http2.ping_timeout_ms", _ms(PING_TIMEOUT_S)),
    ("grpc.keepalive_permit_without_calls", 1),  # an idle channel is probed too
    ("grpc.http2.max_pings_without_data", 0),  # a quiet watch carries no data: ping all the same
)

SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", _ms(SERVER_PING_S)),
    ("grpc.keepalive_timeout_ms", _ms(SERVER_PING_TIMEOUT_S)),
    ("grpc.http2.ping_timeout_ms", _ms(SERVER_PING_TIMEOUT_S)),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", _ms(MIN_PING_INTERVAL_S)),
    ("grpc.http2.max_pings_without_data", 0),
)
