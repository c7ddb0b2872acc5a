"""The liveness probe of one supervised child: a gRPC health Check of its LIVENESS name
(runtime/health_list.py) with a timeout, sent and read without blocking the supervisor's
thread (one probe in flight per child).

    probe = LivenessProbe(lambda: proc.address, tls)
    probe.start(timeout_s=3.0)          # sends one Check
    probe.poll()                        # None while in flight, then True (answered) or False

Any answer counts, whatever the status: the question is whether the process still
answers, not whether it is ready (a loading or draining process is alive). The Check is
answered by the child's gRPC event loop, never by its engine thread, so a long engine
step does not make it miss one. No answer within the timeout (a stopped or hung process),
or a connection that cannot be made to a process that still runs, is a miss.
"""
from __future__ import annotations

from typing import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runtime.health_list import LIVENESS
from runtime.tls import TlsConfig, sync_channel

# A connection of the probe's own that comes back quickly after a restart on the same port.
_OPTIONS = (("grpc.use_local_subchannel_pool", 1), ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000))
_MISSES = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


class LivenessProbe:
    """address(): the child's HOST:PORT now (its port is known once it serves); tls: the
    runtime.tls.TlsConfig its port serves (None: plaintext)."""

    def __init__(self, address: Callable[[], str], tls: TlsConfig | None = None) -> None:
        self._address = address
        self._tls = tls
        # probes alike (the same credentials, so the same chance to reach a child) share it
        self.kind = (tls.cert, tls.ca, tls.server_name) if tls is not None else ()
        self._channel: grpc.Channel | None = None
        self._call: grpc.Future | None = None

    def start(self, timeout_s: float) -> None:
        """Sends one Check (a no-op while one is in flight)."""
        if self._call is not None:
            return
        if self._channel is None:
            self._channel = sync_channel(self._address(), self._tls, _OPTIONS)
        stub = health_pb2_grpc.HealthStub(self._channel)
        # wait_for_ready: a connection still being made is waited for, up to the timeout
        self._call = stub.Check.future(health_pb2.HealthCheckRequest(service=LIVENESS), timeout=timeout_s,
                                       wait_for_ready=True)

    def poll(self) -> bool | None:
        """None while no Check or one in flight; once it ended, whether it was answered."""
        call = self._call
        if call is None or not call.done():
            return None
        self._call = None
        error = call.exception()
        return error is None or (isinstance(error, grpc.Call) and error.code() not in _MISSES)

    def reset(self) -> None:
        """Drops the connection and any Check in flight (the child died or restarts)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
