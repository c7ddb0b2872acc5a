"""starmesh.v1 session messages <-> a session's plain data (core.session_events), a
client's side: its inputs to SessionInput messages, the conductor's SessionEvents to
event dataclasses (the conductor's side is conductor.session_proto). A front end that
speaks to sessions in plain data (the gateway's Realtime translation) meets protobuf
nowhere else.

    message = input_to_proto(Input("e1", "configure", Settings(model="omni")))
    event = event_from_proto(session_event)      # SessionState, TextOut, ..., None for none

What a message leaves unset reads as its default: a configure's empty instructions leave
the session's as they are; an event's missing usage is None; an echoed item's audio part
is a Clip of the bytes it carries (none, from the conductor) at 0 Hz (not stated).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from google.protobuf.json_format import MessageToDict

from core.session_events import (AudioOut, Cleared, Clip, Committed, Deleted, Failure, Input, Item, ItemEvent, RawOut,
                                 ResponseCreated, ResponseDone, ResponseRequest, SessionState, Settings, Speech, State,
                                 TextOut, Truncate, Truncated, TurnDetection, Usage)
from protos.starmesh.v1 import conductor_pb2 as cpb
from protos.starmesh.v1 import session_pb2 as pb


def modality_number(name: str) -> int:
    """"text" / "audio" as the starmesh.v1.Modality number."""
    return cpb.Modality.Value("MODALITY_" + name.upper())


def modality_name(number: int) -> str:
    return cpb.Modality.Name(number).removeprefix("MODALITY_").lower()


# -- inputs ---------------------------------------------------------------------------------
def input_to_proto(inp: Input) -> pb.SessionInput:
    """One input as the SessionInput the conductor reads; ValueError for an unknown kind."""
    m = pb.SessionInput(event_id=inp.event_id)
    v = inp.value
    if inp.kind == "configure":
        m.configure.CopyFrom(settings_to_proto(v))
    elif inp.kind == "create_item":
        m.create_item.CopyFrom(_item_to_proto(v))
    elif inp.kind == "truncate_item":
        m.truncate_item.CopyFrom(pb.ItemTruncate(item_id=v.item_id, content_index=v.content_index,
                                                 audio_end_ms=v.audio_end_ms))
    elif inp.kind == "create_response":
        m.create_response.SetInParent()   # an empty request is still a request
        m.create_response.MergeFrom(_response_to_proto(v))
    elif inp.kind in ("commit_audio", "clear_audio"):
        setattr(m, inp.kind, True)
    elif inp.kind in ("append_audio", "delete_item", "cancel_response"):
        setattr(m, inp.kind, v)
    else:
        raise ValueError(f"Input.kind {inp.kind!r} is no SessionInput kind")
    return m


def settings_to_proto(s: Settings) -> pb.SessionConfig:
    detection = s.turn_detection and pb.TurnDetection(**dataclasses.asdict(s.turn_detection))  # same field names
    c = pb.SessionConfig(model=s.model, instructions=s.instructions or "", voice=s.voice,
                         input_sample_rate=s.input_sample_rate, no_turn_detection=s.no_turn_detection,
                         output_modalities=[modality_number(m) for m in s.output_modalities], turn_detection=detection)
    if s.params:
        c.params.update(dict(s.params))
    return c


def _item_to_proto(item: Item) -> pb.SessionItem:
    # an audio part is PCM16 at the session's input rate, what the conductor takes
    content = [cpb.ContentPart(audio=cpb.MediaPart(data=p.pcm, mime_type="audio/pcm")) if isinstance(p, Clip)
               else cpb.ContentPart(text=p) for p in item.parts]
    return pb.SessionItem(id=item.id, previous_item_id=item.previous_item_id, role=item.role, content=content,
                          status=item.status)


def _response_to_proto(r: ResponseRequest) -> pb.ResponseCreate:
    out = pb.ResponseCreate(output_modalities=[modality_number(m) for m in r.output_modalities],
                            instructions=r.instructions, raw_outputs=list(r.raw_outputs))
    if r.params:
        out.params.update(dict(r.params))
    return out


# -- events ---------------------------------------------------------------------------------
def event_from_proto(ev: pb.SessionEvent) -> Any:
    """A SessionEvent as its dataclass; None for one with no kind (or an output with no part)."""
    kind = ev.WhichOneof("kind")
    return None if kind is None else _EVENTS[kind](getattr(ev, kind))


def state_from_proto(c: pb.SessionConfig) -> State:
    detection = None
    if c.HasField("turn_detection") and not c.no_turn_detection:
        t = c.turn_detection
        detection = TurnDetection.with_defaults(t.threshold, t.prefix_padding_ms, t.silence_duration_ms,
                                                t.create_response, t.interrupt_response)
    return State(c.model, c.instructions, tuple(modality_name(m) for m in c.output_modalities), c.voice, detection,
                 c.input_sample_rate, MessageToDict(c.params) if c.HasField("params") else {})


def item_from_proto(i: pb.SessionItem) -> Item:
    parts = []
    for part in i.content:
        kind = part.WhichOneof("part")
        if kind == "text":
            parts.append(part.text)
        elif kind == "audio":
            parts.append(Clip(bytes(part.audio.data), 0))
    return Item(i.id, i.role, tuple(parts), i.status, i.previous_item_id)


def _output(o: pb.ResponseOutput):
    part = o.WhichOneof("part")
    if part in ("text", "transcript"):
        delta = getattr(o, part)
        return TextOut(o.response_id, o.item_id, tuple(delta.token_ids), delta.text, part == "transcript")
    if part == "audio":
        a = o.audio
        return AudioOut(o.response_id, o.item_id, a.samples, a.sample_rate, a.sequence_number, a.num_samples)
    if part == "raw":
        return RawOut(o.response_id, o.item_id, o.raw)
    return None


def _usage(u: cpb.Usage) -> Usage:
    return Usage(u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens, u.audio_seconds,
                 u.time_to_first_audio_ms, u.context_id)


def _done(d: pb.ResponseDone) -> ResponseDone:
    return ResponseDone(d.response_id, d.status, _usage(d.usage) if d.HasField("usage") else None,
                        item_from_proto(d.item), d.reason)


_EVENTS: dict[str, Callable[[Any], Any]] = {
    "session": lambda v: SessionState(v.session_id, state_from_proto(v.config), v.created),
    "speech_started": lambda v: Speech(True, v.audio_ms, v.item_id),
    "speech_stopped": lambda v: Speech(False, v.audio_ms, v.item_id),
    "audio_committed": lambda v: Committed(v.item_id, v.previous_item_id),
    "audio_cleared": lambda v: Cleared(),
    "item_added": lambda v: ItemEvent(item_from_proto(v), False),
    "item_done": lambda v: ItemEvent(item_from_proto(v), True),
    "item_truncated": lambda v: Truncated(Truncate(v.item_id, v.content_index, v.audio_end_ms)),
    "item_deleted": lambda v: Deleted(v),
    "response_created": lambda v: ResponseCreated(v.response_id, v.item_id),
    "output": _output,
    "response_done": _done,
    "error": lambda v: Failure(v.code, v.message, v.param, v.event_id),
}
