"""grpc's asyncio health servicer with the standard `List` RPC, which grpcio's own does
not implement: every health name the server publishes and its status, in one call. A
front end (the HTTP gateway's /health) learns the conductor's per-model names from it
without a token, as Check and Watch need none.

It also publishes LIVENESS, SERVING from the moment the server exists until the process
ends, loading and draining included: what a liveness probe asks (`starmesh up`'s
supervisor, the rendered Kubernetes manifests). A process that answers it is alive; one
that does not (stopped, hung) is restarted. Readiness is the server's own name ("").
"""
from __future__ import annotations

from grpc_health.v1 import health, health_pb2

LIVENESS = "starmesh.liveness"


class ListingHealthServicer(health.aio.HealthServicer):
    def __init__(self) -> None:
        super().__init__()
        self._server_status[LIVENESS] = health_pb2.HealthCheckResponse.SERVING

    async def List(self, request: health_pb2.HealthListRequest, context) -> health_pb2.HealthListResponse:
        # _server_status: name -> ServingStatus, what set() published (the base class's state)
        statuses = {name: health_pb2.HealthCheckResponse(status=status)
                    for name, status in sorted(self._server_status.items())}
        return health_pb2.HealthListResponse(statuses=statuses)

    async def enter_graceful_shutdown(self) -> None:
        """Every name NOT_SERVING (and set no more) but LIVENESS: a draining process is alive."""
        await super().enter_graceful_shutdown()
        await self._set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)  # _set: past the shutdown guard
