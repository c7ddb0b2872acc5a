"""Request params (a Struct on the wire: numbers arrive as floats) -> SamplingParams."""
from __future__ import annotations

from typing import Any

from engine.sampling_params import SamplingParams
from core.errors import InvalidArgument

_INTS = ("max_new_tokens", "top_k", "seed")
_FLOATS = ("temperature", "top_p", "repetition_penalty")


def sampling_params(params: dict[str, Any], eos_token_ids: tuple[int, ...],
                    stop_token_ids: tuple[int, ...] = ()) -> SamplingParams:
    kwargs: dict[str, Any] = {}
    for name in _INTS:
        if params.get(name) is not None:
            value = params[name]
            if float(value) != int(value):
                raise InvalidArgument(f"params.{name} must be an integer, got {value!r}")
            kwargs[name] = int(value)
    for name in _FLOATS:
        if params.get(name) is not None:
            kwargs[name] = float(params[name])
    if params.get("suppress_token_ids"):
        kwargs["suppress_token_ids"] = tuple(int(t) for t in params["suppress_token_ids"])
    extra_stop = tuple(int(t) for t in params.get("stop_token_ids") or ())
    ignore_eos = bool(params.get("ignore_eos", False))
    return SamplingParams(eos_token_ids=() if ignore_eos else eos_token_ids,
                          stop_token_ids=tuple(stop_token_ids) + extra_stop, **kwargs)
