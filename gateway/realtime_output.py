"""A session's events (core.session_events) as Realtime server events (GA JSON).

    events = ServerEvents(card)
    for event in events.translate(session_event): send(event)

A response is one assistant message item with one content part: ResponseCreated is
response.created and response.output_item.added; its first output opens the part
(response.content_part.added, an "audio" part for audio and its transcript, "text" for
text); AudioOut is response.output_audio.delta (float32 samples as base64 16-bit PCM at
24 kHz), a TextOut response.output_audio_transcript.delta (a transcript) or
response.output_text.delta; ResponseDone closes what was opened (the *.done events with
the whole transcript or text, response.content_part.done, response.output_item.done) and
is response.done with its status and usage. The translator keeps only each open
response's words so far.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from client.model_card import ModelCard
from core.session_events import (AudioOut, Cleared, Clip, Committed, Deleted, Failure, Item, ItemEvent, RawOut,
                                 ResponseCreated, ResponseDone, SessionState, Speech, TextOut, Truncated, Usage)
from gateway.api_error import HTTP_OF, ApiError
from gateway.audio_encoding import pcm16
from gateway.realtime_fields import error_event, new_event_id
from gateway.realtime_session_config import RATE, session_json


@dataclass
class _Response:
    id: str
    item_id: str
    part: str = ""                                   # "", "audio" or "text": the open content part
    words: list[str] = field(default_factory=list)   # transcript or text so far


class ServerEvents:
    def __init__(self, card: ModelCard) -> None:
        self.card = card
        self._responses: dict[str, _Response] = {}
        self._kinds: dict[type, Callable[[Any], Iterator[dict]]] = {
            SessionState: self._session, Speech: self._speech, Committed: self._committed, Cleared: self._cleared,
            ItemEvent: self._item, Truncated: self._truncated, Deleted: self._deleted,
            ResponseCreated: self._response_created, TextOut: self._output, AudioOut: self._output,
            RawOut: self._output, ResponseDone: self._response_done, Failure: self._error}

    def translate(self, event: Any) -> Iterator[dict]:
        handler = self._kinds.get(type(event))
        if handler is None:
            return
        for out in handler(event):
            yield {"event_id": new_event_id(), **out}

    def _session(self, state: SessionState) -> Iterator[dict]:
        yield {"type": "session.created" if state.created else "session.updated",
               "session": session_json(state, self.card)}

    def _speech(self, mark: Speech) -> Iterator[dict]:
        if mark.started:
            yield {"type": "input_audio_buffer.speech_started", "audio_start_ms": mark.audio_ms,
                   "item_id": mark.item_id}
        else:
            yield {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": mark.audio_ms, "item_id": mark.item_id}

    def _committed(self, mark: Committed) -> Iterator[dict]:
        yield {"type": "input_audio_buffer.committed", "item_id": mark.item_id,
               "previous_item_id": mark.previous_item_id or None}

    def _cleared(self, _: Cleared) -> Iterator[dict]:
        yield {"type": "input_audio_buffer.cleared"}

    def _item(self, event: ItemEvent) -> Iterator[dict]:
        yield {"type": "conversation.item.done" if event.done else "conversation.item.added",
               "previous_item_id": event.item.previous_item_id or None, "item": item_json(event.item)}

    def _truncated(self, event: Truncated) -> Iterator[dict]:
        cut = event.truncate
        yield {"type": "conversation.item.truncated", "item_id": cut.item_id, "content_index": cut.content_index,
               "audio_end_ms": cut.audio_end_ms}

    def _deleted(self, event: Deleted) -> Iterator[dict]:
        yield {"type": "conversation.item.deleted", "item_id": event.item_id}

    def _response_created(self, mark: ResponseCreated) -> Iterator[dict]:
        self._responses[mark.response_id] = _Response(mark.response_id, mark.item_id)
        yield {"type": "response.created", "response": {
            "id": mark.response_id, "object": "realtime.response", "status": "in_progress", "status_details": None,
            "output": [], "conversation_id": None, "usage": None}}
        yield {"type": "response.output_item.added", "response_id": mark.response_id, "output_index": 0,
               "item": {"id": mark.item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                        "status": "in_progress", "content": []}}

    def _output(self, output: TextOut | AudioOut | RawOut) -> Iterator[dict]:
        response = self._responses.get(output.response_id)
        if response is None:  # an output of a response this stream never announced: nothing to place it in
            return
        kind = "raw" if isinstance(output, RawOut) else "audio" if isinstance(output, AudioOut) \
            else "transcript" if output.transcript else "text"
        where = {"response_id": response.id, "item_id": response.item_id, "output_index": 0, "content_index": 0}
        if not response.part:
            response.part = "text" if kind == "text" else "audio"
            yield {"type": "response.content_part.added", **where, "part": {"type": response.part, "transcript": ""}
                   if response.part == "audio" else {"type": "text", "text": ""}}
        if kind == "audio":
            yield {"type": "response.output_audio.delta", **where, "delta": audio_delta(output)}
        elif kind in ("text", "transcript"):
            delta = output.text
            if delta:
                response.words.append(delta)
                yield {"type": "response.output_text.delta" if kind == "text" else
                       "response.output_audio_transcript.delta", **where, "delta": delta}

    def _response_done(self, done: ResponseDone) -> Iterator[dict]:
        response = self._responses.pop(done.response_id, None) or _Response(done.response_id, done.item.id)
        where = {"response_id": response.id, "item_id": response.item_id, "output_index": 0, "content_index": 0}
        words = "".join(response.words)
        part = {"type": "audio", "transcript": words} if response.part == "audio" else {"type": "text", "text": words}
        if response.part == "audio":
            yield {"type": "response.output_audio.done", **where}
            yield {"type": "response.output_audio_transcript.done", **where, "transcript": words}
        elif response.part == "text":
            yield {"type": "response.output_text.done", **where, "text": words}
        if response.part:
            yield {"type": "response.content_part.done", **where, "part": part}
        status = done.status or "completed"
        item = {"id": response.item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                "status": done.item.status or ("completed" if status == "completed" else "incomplete"),
                "content": [_content(part)] if response.part else []}
        yield {"type": "response.output_item.done", "response_id": response.id, "output_index": 0, "item": item}
        details = None if status == "completed" else {"type": status, "reason": done.reason or None}
        yield {"type": "response.done", "response": {
            "id": response.id, "object": "realtime.response", "status": status, "status_details": details,
            "output": [item], "conversation_id": None, "usage": None if done.usage is None else usage_json(done.usage),
            "output_modalities": ["audio" if response.part == "audio" else "text"]}}

    def _error(self, error: Failure) -> Iterator[dict]:
        _, type_ = HTTP_OF.get(error.code, (500, "server_error"))
        param = realtime_param(error.param)
        message = param + error.message[len(error.param):] if error.param and \
            error.message.startswith(error.param) else error.message
        yield error_event(ApiError(400, message, type_, param or None, error.code.lower() or None), error.event_id)


# a SessionInput field -> the Realtime client event's field it came from
_PARAMS = (("configure.turn_detection", "session.audio.input.turn_detection"),
           ("configure.voice", "session.audio.output.voice"), ("configure.params.", "session."),
           ("configure.", "session."), ("create_item.", "item."), ("truncate_item.", ""),
           ("create_response.params.max_new_tokens", "response.max_output_tokens"), ("create_response.", "response."),
           ("append_audio", "audio"), ("delete_item", "item_id"), ("cancel_response", "response_id"))


def realtime_param(param: str) -> str:
    """The conductor's name of a bad field (`create_item.content[0].audio`) as the
    Realtime client named it (`item.content[0].audio`)."""
    for prefix, name in _PARAMS:
        if param.startswith(prefix):
            return name + param[len(prefix):]
    return param


def _content(part: dict) -> dict:
    if part["type"] == "audio":
        return {"type": "output_audio", "transcript": part["transcript"]}
    return {"type": "output_text", "text": part["text"]}


def item_json(item: Item) -> dict:
    """A conversation item as the GA protocol shows it (audio content is not echoed)."""
    content = []
    for part in item.parts:
        if item.role == "assistant":
            audio = isinstance(part, Clip)
            content.append({"type": "output_audio"} if audio else {"type": "output_text", "text": part})
        elif isinstance(part, Clip):
            content.append({"type": "input_audio", "transcript": None})
        else:
            content.append({"type": "input_text", "text": part})
    return {"id": item.id, "object": "realtime.item", "type": "message", "role": item.role or "user",
            "status": item.status or "completed", "content": content}


def usage_json(usage: Usage) -> dict:
    """A response's Usage as a Realtime response's usage (tokens; cached prompt tokens)."""
    total = usage.prompt_tokens + usage.completion_tokens
    return {"total_tokens": total, "input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
            "input_token_details": {"cached_tokens": usage.cached_prompt_tokens, "text_tokens": None,
                                    "audio_tokens": None},
            "output_token_details": {"text_tokens": usage.completion_tokens, "audio_tokens": None}}


def audio_delta(chunk: AudioOut) -> str:
    """An AudioOut (float32 little-endian mono) as base64 16-bit PCM at 24 kHz."""
    samples = chunk.samples
    if chunk.sample_rate and chunk.sample_rate != RATE and samples:
        x = np.frombuffer(samples, dtype="<f4")
        n = max(1, round(len(x) * RATE / chunk.sample_rate))
        samples = np.interp(np.arange(n) * (chunk.sample_rate / RATE), np.arange(len(x)), x).astype("<f4").tobytes()
    return base64.b64encode(pcm16(samples)).decode("ascii")

