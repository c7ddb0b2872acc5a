"""Realtime client events (GA JSON) to a session's inputs (core.session_events.Input), one
input per event, its `event_id` kept. A bad event raises EventError naming the field and
the event: the connection answers it with an `error` event and goes on.

    inputs = ClientEvents(card, RealtimeConfig())
    inp = inputs.translate(frame_text)           # an Input, or EventError

Events: session.update, input_audio_buffer.append / commit / clear,
conversation.item.create (message items: user `input_text` / `input_audio`, system
`input_text`, assistant `output_text` / `output_audio` with its transcript),
conversation.item.truncate / delete, response.create, response.cancel. Audio is base64
16-bit PCM at 24 kHz, the session's input rate; an `input_audio` part is a Clip of it.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

from client.model_card import ModelCard
from core.session_events import Clip, Input, Item, ResponseRequest, Truncate
from gateway.api_error import ApiError, bad_field
from gateway.realtime_config import RealtimeConfig
from gateway.realtime_fields import EventError, get, one_of, pcm16, uint32
from gateway.realtime_session_config import RATE, max_output_tokens, output_modalities, session_config

_EVENT_ID = re.compile(r'"event_id"\s*:\s*"([^"\\]{1,128})"')
ROLES = ("user", "assistant", "system")


class ClientEvents:
    """card: the session's model (its voices, params, modalities)."""

    def __init__(self, card: ModelCard, limits: RealtimeConfig = RealtimeConfig()) -> None:
        self.card, self.limits = card, limits
        # client event type -> (the input's kind, its value from the event)
        self._kinds: dict[str, tuple[str, Callable[[dict], Any]]] = {
            "session.update": ("configure", lambda e: session_config(get(e, "session", dict, "session", True), card)),
            "input_audio_buffer.append": ("append_audio", lambda e: pcm16(e.get("audio"), "audio",
                                                                          limits.max_audio_bytes)),
            "input_audio_buffer.commit": ("commit_audio", lambda e: True),
            "input_audio_buffer.clear": ("clear_audio", lambda e: True),
            "conversation.item.create": ("create_item", self._item_create),
            "conversation.item.truncate": ("truncate_item", _truncate),
            "conversation.item.delete": ("delete_item", lambda e: get(e, "item_id", str, "item_id", True)),
            "response.create": ("create_response", self._response_create),
            "response.cancel": ("cancel_response", lambda e: get(e, "response_id", str, "response_id", default="")),
        }

    def translate(self, frame: str | bytes) -> Input:
        event, event_id = self._parse(frame)
        try:
            kind = get(event, "type", str, "type", required=True)
            if kind not in self._kinds:
                raise ApiError(400, f"type {kind!r} is not a client event served here (served: {sorted(self._kinds)})"
                               [:500], param="type", code="unknown_event")
            name, value = self._kinds[kind]
            return Input(event_id, name, value(event))
        except ApiError as e:
            raise EventError(e, event_id) from None

    def _parse(self, frame: str | bytes) -> tuple[dict, str]:
        if len(frame) > self.limits.max_event_bytes:
            found = _EVENT_ID.search(frame[:4096] if isinstance(frame, str) else frame[:4096].decode("latin-1"))
            raise EventError(ApiError(400, f"event of {len(frame)} bytes is over the limit of "
                                           f"{self.limits.max_event_bytes}", param="event", code="event_too_large"),
                             found.group(1) if found else "")
        try:
            event = json.loads(frame)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            raise EventError(ApiError(400, f"the event is not valid JSON: {e}"[:300], param="event",
                                      code="invalid_json")) from None
        if not isinstance(event, dict):
            raise EventError(bad_field("event", f"an event is a JSON object, got {type(event).__name__}"))
        event_id = event.get("event_id")
        if event_id is not None and (not isinstance(event_id, str) or len(event_id) > 128
                                     or not event_id.isprintable()):
            raise EventError(bad_field("event_id", "event_id must be a printable string of at most 128 characters"))
        return event, event_id or ""

    def _response_create(self, event: dict) -> ResponseRequest:
        response = get(event, "response", dict, "response", default={})
        one_of(response, "conversation", ("auto",), "response.conversation")
        if response.get("input") is not None:
            raise bad_field("response.input", "response.input is not supported here: a response answers the "
                                              "session's conversation")
        modalities = output_modalities(response, self.card, "response")
        instructions = get(response, "instructions", str, "response.instructions", default="")
        tokens = max_output_tokens(response, "response.max_output_tokens")
        if tokens is not None and "max_new_tokens" not in self.card.params:
            raise bad_field("response.max_output_tokens", f"model {self.card.name!r} takes no max_new_tokens")
        return ResponseRequest(modalities, instructions, {"max_new_tokens": tokens} if tokens is not None else {})

    def _item_create(self, event: dict) -> Item:
        item = get(event, "item", dict, "item", True)
        previous = get(event, "previous_item_id", str, "previous_item_id", default="")
        item_id = get(item, "id", str, "item.id", default="")
        one_of(item, "type", ("message",), "item.type", default="message")
        role = one_of(item, "role", ROLES, "item.role") or ""
        if not role:
            raise bad_field("item.role", f"item.role is required (one of {list(ROLES)})")
        parts = get(item, "content", list, "item.content", True)
        if not parts:
            raise bad_field("item.content", "item.content is empty")
        content = tuple(self._part(part, role, f"item.content[{i}]") for i, part in enumerate(parts))
        return Item(item_id, role, content, previous_item_id=previous)

    def _part(self, part: Any, role: str, path: str) -> str | Clip:
        if not isinstance(part, dict):
            raise bad_field(path, f"{path} must be an object")
        allowed = {"user": ("input_text", "input_audio"), "system": ("input_text",),
                   "assistant": ("output_text", "output_audio", "text")}[role]
        kind = one_of(part, "type", allowed, f"{path}.type")
        if kind is None:
            raise bad_field(f"{path}.type", f"{path}.type is required (one of {list(allowed)})")
        if kind == "input_audio":
            pcm = pcm16(part.get("audio"), f"{path}.audio", self.limits.max_audio_bytes)
            if not pcm:
                raise bad_field(f"{path}.audio", f"{path}.audio is empty")
            return Clip(pcm, RATE)
        key = "transcript" if kind == "output_audio" else "text"
        return get(part, key, str, f"{path}.{key}", True)


def _truncate(event: dict) -> Truncate:
    return Truncate(get(event, "item_id", str, "item_id", True), uint32(event, "content_index", "content_index"),
                    uint32(event, "audio_end_ms", "audio_end_ms", required=True))
