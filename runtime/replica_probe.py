"""A service replica probed from outside (`starmesh health`, `starmesh status`): its gRPC
health and its Describe answer, over a short-lived channel. A replica that does not answer
is reported, not raised: a probe is what tells a down replica from an up one. `tls`
(runtime.tls.TlsConfig) probes a TLS replica; health needs no token.
"""
from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.starmesh.v1 import component_pb2, component_pb2_grpc
from runtime.tls import TlsConfig, sync_channel


@dataclass(frozen=True)
class Health:
    """status: the health service's answer ("SERVING", "NOT_SERVING", ...), or the gRPC
    status code of a failed check ("UNAVAILABLE", "NOT_FOUND", ...), whose details are
    `error` (None when the check was answered)."""

    status: str
    error: str | None = None

    @property
    def is_serving(self) -> bool:
        return self.error is None and self.status == "SERVING"


def check_health(address: str, service: str = "", timeout_s: float = 5.0, tls: TlsConfig | None = None) -> Health:
    """The health of `service` ("" = the whole server) at `address` (HOST:PORT)."""
    with sync_channel(address, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as e:
            return Health(e.code().name, e.details() or "")
    return Health(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def replica_status(address: str, timeout_s: float = 3.0, tls: TlsConfig | None = None) -> dict:
    """{"address", "health": "SERVING", "open_requests", "leases", "load"} from the replica's
    Describe, or {"address", "health": "DOWN", "error": status code name} without one."""
    try:
        with sync_channel(address, tls) as channel:
            info = component_pb2_grpc.ComponentStub(channel).Describe(component_pb2.DescribeRequest(),
                                                                      timeout=timeout_s)
    except grpc.RpcError as e:
        return {"address": address, "health": "DOWN", "error": e.code().name}
    return {"address": address, "health": "SERVING", "open_requests": info.num_open_requests,
            "leases": info.transport.num_leases, "load": dict(info.load.items())}
