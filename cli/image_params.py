"""`starmesh imagine`'s options as the params of the model that answers, read from its
ListModels card: only the options given are sent (the model's own defaults fill the
rest), each under the card's name for it. An option's name is the param's name
(`--steps` -> `steps`) unless the model's registry entry maps it to another
(`client_params`: BAGEL's `--guidance` is `cfg_text_scale`); `--param KEY=VALUE` sends
any param the card lists, its value read as the card's type. An option the model has no
param for is refused naming it and the params the model takes.
"""
from __future__ import annotations

import argparse

from client.model_card import ModelCard

# imagine option (argparse dest) -> the param it sets when the names agree
OPTIONS = ("steps", "guidance", "renorm", "seed", "negative_prompt", "max_sequence_length")


def parse_size(text: str) -> tuple[int, int]:
    width, sep, height = text.lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise ValueError(f"--size {text!r} is not WxH, e.g. 1024x1024")
    return int(width), int(height)


def given_options(args: argparse.Namespace) -> dict:
    """option -> value of the options given (--size as width and height; --param's pairs
    kept as text under "param:KEY"); ValueError naming a malformed one."""
    out = {name: getattr(args, name) for name in OPTIONS if getattr(args, name, None) is not None}
    if args.size is not None:
        out["width"], out["height"] = parse_size(args.size)
    for pair in args.param or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--param {pair!r} is not KEY=VALUE")
        out[f"param:{key}"] = value
    return out


def card_params(options: dict, card: ModelCard, aliases: dict[str, str]) -> dict:
    """The request params for `card` of the given options; ValueError naming the option
    the model takes no param for, or a --param value not of the param's type."""
    params = {}
    for option, value in options.items():
        if option.startswith("param:"):
            key = option.removeprefix("param:")
            params[key] = _typed(key, value, card)
            continue
        name = option if option in card.params else aliases.get(option, option)
        if name not in card.params:
            flag = "--size" if option in ("width", "height") else f"--{option.replace('_', '-')}"
            raise ValueError(f"{flag}: model {card.name!r} takes no {option} (its params: {sorted(card.params)}; "
                             "--param KEY=VALUE sends one)")
        params[name] = value
    return params


def _typed(key: str, text: str, card: ModelCard):
    from client.model_card import param_from_text

    if key not in card.params:
        raise ValueError(f"--param {key}: model {card.name!r} has no param {key!r} (its params: "
                         f"{sorted(card.params)})")
    try:
        return param_from_text(card.params[key], text)
    except ValueError as e:
        raise ValueError(f"--param {key}: {e}") from None


def client_aliases(model: str) -> dict[str, str]:
    """The registry's option -> param names of served `model` ({} for a name it does not know)."""
    from cluster import registry
    from core.errors import GraphError

    try:
        return dict(registry.entry(model).client_params)
    except GraphError:
        return {}
