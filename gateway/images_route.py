"""POST /v1/images/generations: a prompt in, PNG images out (b64_json), as OpenAI's
images API. `size` "WxH" sets the model's width and height params; `n` images are `n`
requests run side by side, image i with seed `seed + i` (seed: the extension param,
default the model's). Other extensions (steps, guidance, negative_prompt, ...) pass
through as the model's params."""
from __future__ import annotations

import asyncio
import base64
import time

from client.events import Image
from client.generate_call import GenerateCall, Media, Message
from client.model_card import ModelCard
from gateway.api_error import ApiError, bad_field
from gateway.bodies import ImageBody
from gateway.extensions import end_user, request_params

ACCEPTED_QUALITY = (None, "auto", "standard")
ACCEPTED_STYLE = (None, "natural", "vivid")


def image_calls(body: ImageBody, card: ModelCard, request_id: str, images: tuple[Media, ...] = ()) -> list[GenerateCall]:
    """One call per image asked for; `images`: the images an edit sends before the prompt."""
    if not card.makes("image"):
        raise bad_field("model", f"model {card.name!r} makes no images (it makes {list(card.output_modalities)})")
    if body.response_format != "b64_json":
        raise bad_field("response_format", f"response_format must be 'b64_json' (this gateway keeps no image URLs), "
                                           f"got {body.response_format!r}")
    if body.quality not in ACCEPTED_QUALITY:
        raise bad_field("quality", f"quality must be one of {list(ACCEPTED_QUALITY[1:])}, got {body.quality!r}")
    if body.style not in ACCEPTED_STYLE:
        raise bad_field("style", f"style is not supported beyond {list(ACCEPTED_STYLE[1:])}, got {body.style!r}")
    mapped = dict(zip(("width", "height"), _size(body.size))) if body.size not in (None, "auto") else {}
    params = request_params(card, body.extensions(), mapped, {"width": "size", "height": "size"})
    seed = params.get("seed", (card.params["seed"].default if "seed" in card.params else 0) or 0)
    calls = []
    for i in range(body.n):
        each = {**params, "seed": seed + i} if body.n > 1 else params
        prompt = {"messages": (Message("user", (*images, body.prompt)),)} if images else {"text": body.prompt}
        calls.append(GenerateCall(card.name, **prompt, params=each, output_modalities=("image",),
                                  request_id=f"{request_id}-{i}" if body.n > 1 else request_id,
                                  end_user=end_user(body.user)))
    return calls


def size_fields(body: ImageBody) -> dict[str, str]:
    """The conductor's names for what `size` set -> "size" (for its errors), when it is set."""
    if body.size in (None, "auto"):
        return {}
    return {"params.width": "size", "params.height": "size", "params.width/height": "size"}


def _size(size: str) -> tuple[int, int]:
    width, sep, height = size.lower().partition("x")
    if not sep or not _decimal(width) or not _decimal(height) or int(width) < 1 or int(height) < 1:
        raise bad_field("size", f"size must be WIDTHxHEIGHT in pixels (e.g. 1024x1024) or 'auto', got {size!r}")
    return int(width), int(height)


def _decimal(text: str) -> bool:
    """ASCII digits only: str.isdigit also takes "²", which int() refuses."""
    return text.isascii() and text.isdigit()


async def images_response(calls: list[GenerateCall], start) -> dict:
    """Every call's first image; `start(call)` -> a Primed stream (gateway.conductor_calls)."""
    try:
        async with asyncio.TaskGroup() as group:  # one failing cancels the others
            tasks = [group.create_task(_one_image(call, start)) for call in calls]
    except BaseExceptionGroup as e:
        raise e.exceptions[0] from None
    images = [task.result() for task in tasks]
    return {"created": int(time.time()), "data": [{"b64_json": base64.b64encode(png).decode()} for png in images]}


async def _one_image(call: GenerateCall, start) -> bytes:
    primed = await start(call)
    try:
        async for ev in primed.all():
            if isinstance(ev, Image):
                return ev.data
    finally:
        await primed.close()
    raise ApiError(500, f"model {call.model!r} ended without an image", "server_error")
