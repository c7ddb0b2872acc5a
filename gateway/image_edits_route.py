"""POST /v1/images/edits: images and a prompt in (a multipart form, as the openai SDK's
`images.edit` sends it), PNG images out (b64_json), as OpenAI's images API.

Form fields: `image` (one file) or `image[]` (several; PNG or JPEG), `prompt`, `model`,
`n`, `size`, `response_format`, `quality`, `user`; any other field is an extension: a
param of the model (ListModels' params), its text read as the param's type ("8" -> 8).
`mask` is refused (no model here paints inside a mask). The images go before the prompt
in one user message (BAGEL's order); the rest is /v1/images/generations'
(gateway.images_route): `n` requests, image i with seed `seed + i`. A model that edits
draws at its resized input's size: `size` is checked, then left to the model.
"""
from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from client.generate_call import GenerateCall, Media
from client.model_card import ModelCard, param_from_text
from gateway.api_error import bad_field
from gateway.bodies import ImageBody

IMAGE_FIELDS = ("image", "image[]")
BODY_FIELDS = ("prompt", "model", "size", "response_format", "quality", "user")
IMAGE_TYPES = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg"}
UNSUPPORTED = ("mask",)
# the conductor's name for what an edit sent -> the form's (with gateway.images_route.size_fields)
IMAGE_FIELDS_OF = {"messages": "image"}


async def edit_form(form) -> tuple[dict[str, Any], tuple[Media, ...]]:
    """(the form's text fields, its images); a 400 naming a missing or unreadable field."""
    fields: dict[str, Any] = {}
    images = []
    for key, value in form.multi_items():
        if key in UNSUPPORTED:
            raise bad_field(key, f"{key} is not supported: the model edits the whole image")
        if key in IMAGE_FIELDS:
            images.append(await _image(value, f"{key}[{len(images)}]" if key.endswith("]") else key))
        elif hasattr(value, "read"):
            raise bad_field(key, f"{key} must be a text field, not a file")
        elif key in fields:
            raise bad_field(key, f"{key} is given twice")
        else:
            fields[key] = value
    if not images:
        raise bad_field("image", "image is required: a PNG or JPEG file (image[] for several)")
    return fields, tuple(images)


async def _image(upload, where: str) -> Media:
    if not hasattr(upload, "read"):
        raise bad_field(where, f"{where} must be a file (PNG or JPEG), not a text field")
    data = await upload.read()
    mime = next((m for magic, m in IMAGE_TYPES.items() if data.startswith(magic)), None)
    if mime is None:
        raise bad_field(where, f"{where} is not a PNG or JPEG file")
    return Media("image", data, mime)


def edit_body(fields: dict[str, Any], card: ModelCard) -> ImageBody:
    """The form's fields as an ImageBody: `n` an integer, every extension read as its
    param's type; a 400 naming the field otherwise."""
    values: dict[str, Any] = {k: fields[k] for k in BODY_FIELDS if k in fields}
    if "n" in fields:
        if not (fields["n"].isascii() and fields["n"].isdigit()):
            raise bad_field("n", f"n must be an integer from 1 to 10, got {fields['n']!r}")
        values["n"] = int(fields["n"])
    for key in fields.keys() - set(BODY_FIELDS) - {"n"}:
        if key not in card.params:
            raise bad_field(key, f"{key} is not supported for model {card.name!r} (its extension params: "
                                 f"{sorted(card.params)})")
        try:
            values[key] = param_from_text(card.params[key], fields[key])
        except ValueError as e:
            raise bad_field(key, f"{key}: {e}") from None
    try:
        return ImageBody.model_validate(values)
    except ValidationError as e:
        first = e.errors()[0]
        param = ".".join(str(p) for p in first.get("loc", ())) or None
        raise bad_field(param, f"{param or 'body'}: {first.get('msg')}") from None


def check_edits(card: ModelCard) -> None:
    if not card.makes("image"):
        raise bad_field("model", f"model {card.name!r} makes no images (it makes {list(card.output_modalities)})")
    if "media" not in card.inputs:
        raise bad_field("model", f"model {card.name!r} takes no image (it takes {list(card.inputs)})")


def edit_calls(body: ImageBody, card: ModelCard, request_id: str, images: tuple[Media, ...]) -> list[GenerateCall]:
    from gateway.images_route import image_calls

    check_edits(card)
    return image_calls(body, card, request_id, images)
