"""A battery of bad inputs for the HTTP gateway, built from what the conductor serves.

    fields = numeric_fields(cards, speech="omni", chat="omni", image="sd3")
    for bad in battery(cards, speech="omni", chat="omni", image="sd3"):
        status, error = bad.send(url, key)        # 400 naming bad.param, never a 5xx

Every numeric field of every route (the OpenAI fields each route reads and every int or
float param of the model's card, which the routes take as extension keys), each with
values it must refuse: NaN and the infinities (Python's json reads them), 1e400 (read as
infinity), wrong types, integers past 64 bits, fractions for integers, and values just
outside the card's range; then malformed bodies (bad JSON, lone surrogates, deep
nesting, a 5000-digit number). Bodies are JSON text written here, literally, so that
NaN reaches the gateway as a client would send it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

ALWAYS_BAD = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", '"1"', "true", "[1]", '{"a": 1}')
INT_BAD = ("1.5", str(1 << 64), str(-(1 << 64)))
SPEECH, CHAT, IMAGES = "/v1/audio/speech", "/v1/chat/completions", "/v1/images/generations"
MARK = "__bad_value__"  # where with_literal writes its literal


@dataclass(frozen=True)
class NumericField:
    """One numeric body key of a route: `base` is a valid body without it; kind "int" or
    "float"; min/max/exclusive_min: its valid range (None: unbounded)."""
    path: str
    base: dict = field(compare=False)
    name: str
    kind: str
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False

    def body(self, literal: str) -> bytes:
        """The base body with this field set to a JSON literal (any text, e.g. NaN)."""
        return with_literal({**self.base, self.name: MARK}, literal)


def with_literal(body: dict, literal: str) -> bytes:
    """`body` as JSON with its MARK value written as `literal`, verbatim."""
    return json.dumps(body).replace(f'"{MARK}"', literal).encode()


@dataclass(frozen=True)
class BadInput:
    """A request the gateway must refuse with a 4xx; param: the field its error must name
    (None: any or none)."""
    path: str
    body: bytes
    param: str | None
    what: str
    content_type: str = "application/json"


def bases(cards, speech: str, chat: str, image: str) -> dict[str, dict]:
    voices = cards[speech].voices
    return {SPEECH: {"model": speech, "input": "Hello there", "response_format": "pcm",
                     **({"voice": voices[0]} if voices else {})},
            CHAT: {"model": chat, "messages": [{"role": "user", "content": "Hello"}]},
            IMAGES: {"model": image, "prompt": "a red fox"}}


def numeric_fields(cards, speech: str, chat: str, image: str) -> list[NumericField]:
    """Every numeric field of the three routes, with its range (module docstring)."""
    base = bases(cards, speech, chat, image)

    def of_card(path: str, name: str, key: str | None = None, kind: str = "float") -> NumericField:
        spec = cards[base[path]["model"]].params.get(key or name)
        if spec is None:  # a field the model takes no param for: any value is refused
            return NumericField(path, base[path], name, kind, 0, -1)
        return NumericField(path, base[path], name, spec.type, spec.min, spec.max, spec.exclusive_min)

    out = [NumericField(SPEECH, base[SPEECH], "speed", "float", 1.0, 1.0),
           NumericField(CHAT, base[CHAT], "n", "int", 1, 1), NumericField(IMAGES, base[IMAGES], "n", "int", 1, 10),
           of_card(CHAT, "max_tokens", "max_new_tokens", "int"),
           of_card(CHAT, "max_completion_tokens", "max_new_tokens", "int"),
           of_card(CHAT, "temperature"), of_card(CHAT, "top_p"), of_card(CHAT, "seed", kind="int")]
    for path in (SPEECH, CHAT, IMAGES):
        taken = {f.name for f in out if f.path == path}
        card = cards[base[path]["model"]]
        out += [of_card(path, name) for name, spec in card.params.items()
                if spec.type in ("int", "float") and name not in taken and name != card.voice_param]
    return out


def out_of_range(f: NumericField) -> list[str]:
    """JSON literals just outside f's range."""
    out = []
    if f.min is not None:
        low = f.min if f.exclusive_min else f.min - 1
        out.append(str(int(low)) if f.kind == "int" else repr(float(low)))
    if f.max is not None:
        out.append(str(int(f.max) + 1) if f.kind == "int" else repr(float(f.max) * 2 + 1))
    return out


def bad_values(f: NumericField) -> list[str]:
    return [*ALWAYS_BAD, *(INT_BAD if f.kind == "int" else ()), *out_of_range(f)]


def malformed(cards, speech: str, chat: str, image: str) -> list[BadInput]:
    """Bodies that are bad as a whole or in a text field."""
    base = bases(cards, speech, chat, image)
    surrogate = '"a\\ud800b"'
    out = [BadInput(path, with_literal({**base[path], name: MARK}, surrogate), name, f"lone surrogate in {name}")
           for path, name in ((SPEECH, "input"), (IMAGES, "prompt"))]
    out += [
        BadInput(CHAT, with_literal({**base[CHAT], "messages": [{"role": "user", "content": MARK}]}, surrogate),
                 "messages[0].content", "lone surrogate in a message"),
        BadInput(IMAGES, json.dumps({**base[IMAGES], "size": "\u00b2x\u00b2"}).encode(), "size",
                 "size in superscripts"),
        BadInput(CHAT, b'{"model": ', None, "truncated JSON"),
        BadInput(CHAT, b"[1, 2]", None, "a JSON array"),
        BadInput(SPEECH, b"NaN", None, "a bare NaN"),
        BadInput(IMAGES, b"[" * 100_000 + b"]" * 100_000, None, "100,000 nested arrays"),
        BadInput(IMAGES, with_literal({**base[IMAGES], "seed": MARK}, "7" * 5000), None, "a 5000-digit seed"),
        BadInput(CHAT, json.dumps({**base[CHAT], "model": "m" * 100_000}).encode(), "model", "a 100 kB model name"),
        BadInput(CHAT, json.dumps({**base[CHAT], "messages": []}).encode(), "messages", "no messages"),
        BadInput(SPEECH, json.dumps(base[SPEECH]).encode(), None, "JSON sent as text/plain", "text/plain"),
        BadInput(SPEECH, b"", None, "an empty body"),
    ]
    return out


def battery(cards, speech: str, chat: str, image: str) -> list[BadInput]:
    """Every numeric field with every bad value, then the malformed bodies."""
    out = [BadInput(f.path, f.body(v), f.name, f"{f.path} {f.name}={v}")
           for f in numeric_fields(cards, speech, chat, image) for v in bad_values(f)]
    return out + malformed(cards, speech, chat, image)
