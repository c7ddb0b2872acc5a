"""A request's params checked against the model's card before anything is sent: each
value of the kind and in the range ListModels declares (core.params reads them as the
conductor does), so a non-finite, out-of-range or wrong-typed value is a 400 naming the
caller's field, and the values the gateway computes with (an image's seed) are numbers.

    checked(card, {"seed": 3, "steps": 8}, {"max_new_tokens": "max_tokens"})
"""
from __future__ import annotations

from typing import Any, Mapping

from client.model_card import ModelCard, ParamCard
from core.errors import InvalidArgument
from core.params import ParamSpec
from gateway.api_error import bad_field
from gateway.bodies import utf8_text

KINDS = {"int": int, "float": float, "bool": bool, "string": str, "ids": tuple}  # ListModels' type names


def checked(card: ModelCard, params: Mapping[str, Any], names: Mapping[str, str] = {}) -> dict[str, Any]:
    """`params` (every key one of the card's), each value checked and read as its kind
    (4.0 -> 4 for an int); `names`: param -> the caller's field where they differ."""
    out = {}
    for key, value in params.items():
        field = names.get(key, key)
        if key not in card.params:
            raise bad_field(field, f"{field}: model {card.name!r} takes no {key}")
        out[key] = check_value(card.params[key], value, field)
    return out


def check_value(spec: ParamCard, value: Any, field: str) -> Any:
    kind = KINDS.get(spec.type)
    if kind is None:  # a kind this gateway does not know: the conductor checks it
        return value
    try:
        value = ParamSpec(spec.name, kind, spec.default, spec.min, spec.max, spec.exclusive_min).check(value)
        if kind is str:
            utf8_text(value)
    except (InvalidArgument, ValueError) as e:
        message = str(e)
        prefix = f"params.{spec.name}"
        message = field + message[len(prefix):] if message.startswith(prefix) else f"{field} {message}"
        raise bad_field(field, message) from None
    return list(value) if kind is tuple else value
