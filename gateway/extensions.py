"""Extension fields: keys of an OpenAI body that OpenAI does not define here, passed to
the conductor as the model's request params (ListModels' params). A key the model does
not take is a 400 naming it; a field sent at its neutral value (frameworks send
`presence_penalty: 0`, `stop: null`) asks for nothing and is dropped. Every value is
checked against the model's card (gateway.param_check)."""
from __future__ import annotations

from typing import Any, Mapping

from client.model_card import ModelCard
from gateway.api_error import bad_field
from gateway.param_check import checked

NEUTRAL = {"presence_penalty": 0, "frequency_penalty": 0, "logprobs": False, "stop": [], "logit_bias": {},
           "parallel_tool_calls": True, "stream_options": {}}


def voice_param(card: ModelCard, voice: str | None, field: str) -> dict[str, str]:
    """{the model's voice param: voice} for a voice the model has ({} for None); a 400
    naming `field` otherwise."""
    if voice is None:
        return {}
    if not card.voice_param:
        raise bad_field(field, f"model {card.name!r} has no voices")
    if voice not in card.voices:
        raise bad_field(field, f"voice {voice!r} is not a voice of model {card.name!r} (voices: {list(card.voices)})")
    return {card.voice_param: voice}


def request_params(card: ModelCard, extensions: Mapping[str, Any], mapped: Mapping[str, Any],
                   names: Mapping[str, str] = {}) -> dict[str, Any]:
    """The conductor's params: `mapped` (OpenAI fields this route translated, by param
    name; None values dropped; `names`: param -> the field it came from) and the body's
    extensions, every value checked against the card (a 400 naming the field)."""
    out = {key: value for key, value in mapped.items() if value is not None}
    names = {key: name for key, name in names.items() if key in out}  # an extension is named by its key
    for key, value in extensions.items():
        if value is None or (key in NEUTRAL and NEUTRAL[key] == value):
            continue
        if key not in card.params:
            raise bad_field(key, f"{key} is not supported for model {card.name!r} (its extension params: "
                                 f"{sorted(card.params)})")
        if key in out:
            raise bad_field(key, f"{key} is set twice: as an extension and by the field that maps to it")
        out[key] = value
    return checked(card, out, names)


def end_user(value: str | None, field: str = "user") -> str:
    """OpenAI's `user` (the caller's end user), passed on as the owner of the contexts the
    request keeps or continues (one API key serves many users; core.context_use). It
    travels as gRPC metadata: printable ASCII, at most 256 characters, or a 400 naming it."""
    if not value:
        return ""
    if len(value) > 256 or not all(" " <= c <= "~" for c in value):
        raise bad_field(field, f"{field} must be printable ASCII of at most 256 characters")
    return value
