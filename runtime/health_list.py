"""grpc's asyncio health servicer with the standard `List` RPC, which grpcio's own does
not implement: every health name the server publishes and its status, in one call. A
front end (the HTTP gateway's /health) learns the conductor's per-model names from it
without a token, as Check and Watch need none."""
from __future__ import annotations

from grpc_health.v1 import health, health_pb2


class ListingHealthServicer(health.aio.HealthServicer):
    async def List(self, request: health_pb2.HealthListRequest, context) -> health_pb2.HealthListResponse:
        # _server_status: name -> ServingStatus, what set() published (the base class's state)
        statuses = {name: health_pb2.HealthCheckResponse(status=status)
                    for name, status in sorted(self._server_status.items())}
        return health_pb2.HealthListResponse(statuses=statuses)
