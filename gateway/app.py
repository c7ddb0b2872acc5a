"""The gateway's ASGI app: OpenAI's routes over one conductor session.

    app = make_app(Connection("127.0.0.1:50050"), GatewayConfig())   # uvicorn serves it

Routes: POST /v1/audio/speech, /v1/chat/completions, /v1/images/generations; GET
/v1/models, /v1/models/{model}, /health (no token), /metrics; the WebSocket
/v1/realtime; the voice page at / (its files under /static, no token). The caller's
`Authorization` header goes to the conductor as is: the conductor checks it.
"""
from __future__ import annotations

import contextlib
import re
import uuid
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from client.connection import Connection
from client.session import ConductorSession
from gateway.api_error import ApiError
from gateway.body_limit import BodyBudget, BodyLimit
from gateway.catalog import Catalog
from gateway.conductor_calls import ConductorCalls
from gateway.config import GatewayConfig
from gateway.http_metrics import CLIENT_CLOSED, HttpMetrics
from gateway.metrics import GatewayMetrics
from gateway.responses import ClientGone, error_response


@dataclass
class Gateway:
    """Per-app state, built when the app starts (its lifespan)."""
    config: GatewayConfig
    session: ConductorSession
    catalog: Catalog
    calls: ConductorCalls
    metrics: GatewayMetrics


def make_app(connection: Connection, config: GatewayConfig = GatewayConfig(),
             metrics: GatewayMetrics | None = None) -> FastAPI:
    metrics = metrics or GatewayMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        async with ConductorSession(connection) as session:
            app.state.gateway = Gateway(config, session, Catalog(session), ConductorCalls(session, config.timeout_s),
                                        metrics)
            yield

    app = FastAPI(title="starmesh gateway", lifespan=lifespan, docs_url=None, redoc_url=None)
    _errors(app)
    from gateway import realtime_route, routes, voice_page

    app.include_router(routes.router)
    app.include_router(realtime_route.router)
    app.include_router(voice_page.router)
    app.mount("/static", voice_page.static_files(), name="static")
    # added last, outermost: the metrics count the body limit's refusals too
    app.add_middleware(BodyLimit, max_body_bytes=config.max_body_bytes,
                       budget=BodyBudget(config.max_bodies_in_flight_bytes, metrics.body_bytes),
                       timeout_s=config.body_timeout_s)
    app.add_middleware(HttpMetrics, metrics=metrics)
    return app


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


def authorization(request: Request) -> str:
    """The caller's Authorization header ("" without one); 401 for one gRPC metadata
    cannot carry (printable ASCII only)."""
    value = request.headers.get("authorization", "")
    if any(not 32 <= ord(c) < 127 for c in value):
        raise ApiError(401, "Authorization header: printable ASCII only", "authentication_error")
    return value


def new_request_id() -> str:
    return uuid.uuid4().hex[:24]


def _errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> Response:
        return error_response(e)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, e: RequestValidationError) -> Response:
        # the deepest error: of a union (content: text or parts), the branch the body took
        first = max(e.errors(), key=lambda x: len(x.get("loc", ())), default={"loc": (), "msg": "invalid request body"})
        param = _param(first.get("loc", ()))
        return error_response(ApiError(400, f"{param or 'body'}: {first.get('msg')}", param=param or None))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> Response:
        return error_response(ApiError(e.status_code, f"{request.method} {request.url.path}: {e.detail}"))

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, e: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED)  # never read: the client has left


def _param(loc) -> str:
    """A pydantic error location as the field's path: ("body", "messages", 0, "role") ->
    "messages[0].role"; a union's branch tags ("list[ContentPartBody]",
    "function-after[...]", "str") are not fields and are left out."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, str) and _UNION_TAG.match(part):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_UNION_TAG = re.compile(r"^(str|int|float|bool|none|[\w-]+\[.*\])$")
