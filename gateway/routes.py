"""The gateway's routes: each reads its body, asks the catalog for the model, builds the
conductor call (the *_route modules), and answers streamed or whole. A client that
leaves at any point cancels its call: while it waits for its first event
(unless_disconnected), while a whole answer is made, or mid-stream (gateway.responses)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from client.call_failed import CallFailed
from gateway.api_error import ApiError
from gateway.app import authorization, gateway_of, new_request_id
from gateway.bodies import ChatBody, ImageBody, SpeechBody
from gateway.chat_route import chat_call, chat_response, chat_stream
from gateway.image_edits_route import IMAGE_FIELDS_OF, edit_body, edit_calls, edit_form
from gateway.images_route import image_calls, images_response, size_fields
from gateway.metrics import CONTENT_TYPE_LATEST
from gateway.responses import streamed, unless_disconnected
from gateway.speech_route import media_type, speech_bytes, speech_call
from gateway.sse import MEDIA_TYPE as SSE

router = APIRouter()


@router.post("/v1/audio/speech")
async def speech(body: SpeechBody, request: Request) -> Response:
    gw, auth, request_id = gateway_of(request), authorization(request), new_request_id()
    card = await gw.catalog.card(body.model, auth)
    call, fields = speech_call(body, card, request_id)
    primed = await unless_disconnected(request, gw.calls.start(call, auth, fields), "/v1/audio/speech", gw.metrics)
    return streamed(speech_bytes(body, card, primed), primed, media_type(body), "/v1/audio/speech", gw.metrics,
                    request_id)


@router.post("/v1/chat/completions")
async def chat(body: ChatBody, request: Request) -> Response:
    gw, auth, request_id = gateway_of(request), authorization(request), new_request_id()
    card = await gw.catalog.card(body.model, auth)
    call, fields = chat_call(body, card, request_id)
    primed = await unless_disconnected(request, gw.calls.start(call, auth, fields), "/v1/chat/completions",
                                       gw.metrics)
    if body.stream:
        return streamed(chat_stream(body, card, request_id, primed), primed, SSE, "/v1/chat/completions",
                        gw.metrics, request_id)
    try:
        answer = await unless_disconnected(request, chat_response(body, card, request_id, primed),
                                           "/v1/chat/completions", gw.metrics)
    finally:
        await primed.close()
    return JSONResponse(answer, headers={"x-request-id": request_id})


@router.post("/v1/images/generations")
async def images(body: ImageBody, request: Request) -> Response:
    gw, auth, request_id = gateway_of(request), authorization(request), new_request_id()
    card = (await gw.catalog.card(body.model, auth) if body.model is not None
            else await gw.catalog.only("image", auth))
    calls, names = image_calls(body, card, request_id), size_fields(body)
    answer = await unless_disconnected(request, images_response(calls, lambda c: gw.calls.start(c, auth, names)),
                                       "/v1/images/generations", gw.metrics)
    return JSONResponse(answer, headers={"x-request-id": request_id})


@router.post("/v1/images/edits")
async def image_edits(request: Request) -> Response:
    gw, auth, request_id = gateway_of(request), authorization(request), new_request_id()
    fields, images = await edit_form(await request.form())
    card = (await gw.catalog.card(fields["model"], auth) if "model" in fields
            else await gw.catalog.only("image", auth))
    body = edit_body(fields, card)
    calls, names = edit_calls(body, card, request_id, images), {**IMAGE_FIELDS_OF, **size_fields(body)}
    answer = await unless_disconnected(request, images_response(calls, lambda c: gw.calls.start(c, auth, names)),
                                       "/v1/images/edits", gw.metrics)
    return JSONResponse(answer, headers={"x-request-id": request_id})


@router.get("/v1/models")
async def models(request: Request) -> JSONResponse:
    cards = await gateway_of(request).catalog.refresh(authorization(request))
    return JSONResponse({"object": "list", "data": [_model_json(card) for card in cards.values()]})


@router.get("/v1/models/{model}")
async def model(model: str, request: Request) -> JSONResponse:
    gw, auth = gateway_of(request), authorization(request)
    await gw.catalog.refresh(auth)
    return JSONResponse(_model_json(await gw.catalog.card(model, auth)))


def _model_json(card) -> dict:
    return {"id": card.name, "object": "model", "created": 0, "owned_by": "starmesh",
            "output_modalities": list(card.output_modalities), "voices": list(card.voices)}


@router.get("/health")
async def health(request: Request, model: str | None = None) -> JSONResponse:
    """200 when the conductor and every model (or `model`) are SERVING: each model is
    SERVING while every service it needs has a serving replica. No token needed."""
    try:
        statuses = await gateway_of(request).session.health_list()
    except CallFailed as e:
        return JSONResponse({"status": "unavailable", "conductor": e.code}, status_code=503)
    models_ = {name: s for name, s in statuses.items() if name and not name.startswith(("starmesh.", "grpc."))}
    if model is not None:
        if model not in models_:
            raise ApiError(404, f"The model {model!r} does not exist (served: {sorted(models_)})", param="model",
                           code="model_not_found")
        models_ = {model: models_[model]}
    ready = statuses.get("") == "SERVING" and all(s == "SERVING" for s in models_.values())
    return JSONResponse({"status": "ok" if ready else "unavailable", "conductor": statuses.get(""),
                         "models": models_}, status_code=200 if ready else 503)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(gateway_of(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
