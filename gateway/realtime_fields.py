"""Reading a Realtime client event's JSON fields, and the `error` event that answers a
bad one. Every check names the field by its path in the event (`session.audio.input.format.rate`,
`item.content[0].audio`) and keeps the event's `event_id`, so a client can tell which of
its events was refused; the session lives on.

    fields = Fields(event, event_id)
    text = fields.text("item.content[0].text", part, "text")      # ApiError naming the path
"""
from __future__ import annotations

import base64
import binascii
import uuid
from typing import Any, Mapping

from gateway.api_error import ApiError, bad_field
from gateway.bodies import utf8_text

UINT32_MAX = (1 << 32) - 1
_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", dict: "an object",
               list: "an array"}


class EventError(Exception):
    """A client event refused: `error` (its message, param and code) and the event's id."""

    def __init__(self, error: ApiError, event_id: str = "") -> None:
        super().__init__(error.message)
        self.error, self.event_id = error, event_id


def new_event_id() -> str:
    return f"event_{uuid.uuid4().hex[:20]}"


def error_event(error: ApiError, event_id: str = "") -> dict:
    """The server's `error` event: type, code, message, param and the client event it answers."""
    body = error.body()["error"]
    return {"type": "error", "event_id": new_event_id(),
            "error": {**body, "code": body["code"] or "invalid_value", "event_id": event_id or None}}


def get(obj: Mapping[str, Any], key: str, kind: type, path: str, required: bool = False, default: Any = None) -> Any:
    """obj[key] checked to be of `kind` (an int is no bool; a float takes an int; a string
    must be UTF-8 encodable); None or absent gives `default`, or a refusal when required."""
    value = obj.get(key)
    if value is None:
        if required:
            raise bad_field(path, f"{path} is required")
        return default
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if not ok:
        raise bad_field(path, f"{path} must be {_KIND_NAMES[kind]}, got {type(value).__name__}")
    if kind is str:
        text(value, path)
    return value


def text(value: str, path: str) -> str:
    try:
        return utf8_text(value)
    except ValueError as e:
        raise bad_field(path, f"{path} {e}") from None


def uint32(obj: Mapping[str, Any], key: str, path: str, required: bool = False, default: int = 0) -> int:
    value = get(obj, key, int, path, required, default)
    if not 0 <= value <= UINT32_MAX:
        raise bad_field(path, f"{path} must be in [0, {UINT32_MAX}], got {value}")
    return value


def one_of(obj: Mapping[str, Any], key: str, choices: tuple, path: str, default: Any = None) -> Any:
    value = get(obj, key, str, path, default=default)
    if value is not None and value not in choices:
        raise bad_field(path, f"{path} must be one of {list(choices)}, got {value!r}"[:300])
    return value


def pcm16(value: Any, path: str, max_bytes: int) -> bytes:
    """Base64 of 16-bit little-endian PCM: strict base64, a whole number of samples, at
    most `max_bytes` decoded (checked on the encoded length first: nothing large is decoded)."""
    if not isinstance(value, str):
        raise bad_field(path, f"{path} must be a base64 string of 16-bit PCM, got {type(value).__name__}")
    if len(value) > (max_bytes + 2) // 3 * 4:
        raise bad_field(path, f"{path} holds more than {max_bytes} bytes of audio")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise bad_field(path, f"{path} is not valid base64") from None
    if len(data) > max_bytes:
        raise bad_field(path, f"{path} holds more than {max_bytes} bytes of audio")
    if len(data) % 2:
        raise bad_field(path, f"{path} is not 16-bit PCM: {len(data)} bytes is an odd count")
    return data
