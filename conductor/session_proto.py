"""starmesh.v1 session messages <-> the session's plain data (core.session_events), the
conductor's side: inputs from messages, events to messages (a client's side is
client.session_proto). The only place session code meets protobuf, besides the servicer."""
from __future__ import annotations

import dataclasses

from google.protobuf.json_format import MessageToDict

from core.session_events import (AUDIO, TEXT, AudioOut, Cleared, Clip, Committed, Deleted, Failure, Input, Item,
                                 ItemEvent, RawOut, ResponseCreated, ResponseDone, ResponseRequest, SessionState,
                                 Settings, Speech, State, TextOut, Truncate, Truncated, TurnDetection, Usage)
from core.errors import InvalidArgument
from protos.starmesh.v1 import conductor_pb2 as cpb
from protos.starmesh.v1 import session_pb2 as pb

_MODALITY = {cpb.MODALITY_TEXT: TEXT, cpb.MODALITY_AUDIO: AUDIO}
_MODALITY_PB = {v: k for k, v in _MODALITY.items()}


def input_from_proto(m: pb.SessionInput, sample_rate: int) -> Input:
    """sample_rate: the session's input rate (a user item's audio part is PCM16 at it)."""
    kind = m.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument("SessionInput: none of its kinds is set")
    v = getattr(m, kind)
    if kind == "configure":
        v = _settings(v)
    elif kind == "create_item":
        v = _item(v, sample_rate)
    elif kind == "truncate_item":
        v = Truncate(v.item_id, v.content_index, v.audio_end_ms)
    elif kind == "create_response":
        v = ResponseRequest(_modalities(v.output_modalities, "create_response.output_modalities"), v.instructions,
                            MessageToDict(v.params) if v.HasField("params") else {}, tuple(v.raw_outputs))
    elif kind in ("append_audio", "delete_item", "cancel_response"):
        v = bytes(v) if kind == "append_audio" else str(v)
    return Input(m.event_id, kind, v)


def _modalities(values, field: str) -> tuple[str, ...]:
    out = []
    for i, v in enumerate(values):
        if v not in _MODALITY:
            raise InvalidArgument(f"{field}[{i}] must be TEXT or AUDIO")
        out.append(_MODALITY[v])
    if len(out) > 1:
        raise InvalidArgument(f"{field}: one of TEXT or AUDIO (AUDIO comes with its transcript)")
    return tuple(out)


def _settings(c: pb.SessionConfig) -> Settings:
    td = None
    if c.HasField("turn_detection"):
        t = c.turn_detection
        td = TurnDetection.with_defaults(t.threshold, t.prefix_padding_ms, t.silence_duration_ms, t.create_response,
                                         t.interrupt_response)
    return Settings(c.model, c.instructions if c.instructions else None,
                    _modalities(c.output_modalities, "configure.output_modalities"), c.voice, td,
                    c.no_turn_detection, c.input_sample_rate, MessageToDict(c.params) if c.HasField("params") else {})


def _item(i: pb.SessionItem, sample_rate: int) -> Item:
    parts = []
    for j, part in enumerate(i.content):
        kind = part.WhichOneof("part")
        if kind == "text":
            parts.append(part.text)
        elif kind == "audio":
            data = bytes(part.audio.data)
            if len(data) % 2:
                raise InvalidArgument(f"create_item.content[{j}].audio has {len(data)} bytes: PCM16 takes 2 a sample")
            parts.append(Clip(data, sample_rate))
        else:
            raise InvalidArgument(f"create_item.content[{j}]: a session item takes text or audio parts")
    return Item(i.id, i.role, tuple(parts), "completed", i.previous_item_id)


def event_to_proto(event_id: str, ev) -> pb.SessionEvent:
    out = pb.SessionEvent(event_id=event_id)
    if isinstance(ev, SessionState):
        out.session.session_id, out.session.created = ev.session_id, ev.created
        out.session.config.CopyFrom(_config(ev.state))
    elif isinstance(ev, Speech):
        (out.speech_started if ev.started else out.speech_stopped).CopyFrom(pb.SpeechMark(audio_ms=ev.audio_ms,
                                                                                          item_id=ev.item_id))
    elif isinstance(ev, Committed):
        out.audio_committed.CopyFrom(pb.ItemMark(item_id=ev.item_id, previous_item_id=ev.previous_item_id))
    elif isinstance(ev, Cleared):
        out.audio_cleared = True
    elif isinstance(ev, ItemEvent):
        (out.item_done if ev.done else out.item_added).CopyFrom(item_to_proto(ev.item))
    elif isinstance(ev, Truncated):
        t = ev.truncate
        out.item_truncated.CopyFrom(pb.ItemTruncate(item_id=t.item_id, content_index=t.content_index,
                                                    audio_end_ms=t.audio_end_ms))
    elif isinstance(ev, Deleted):
        out.item_deleted = ev.item_id
    elif isinstance(ev, ResponseCreated):
        out.response_created.CopyFrom(pb.ResponseMark(response_id=ev.response_id, item_id=ev.item_id))
    elif isinstance(ev, (TextOut, AudioOut, RawOut)):
        _output(ev, out.output)
    elif isinstance(ev, ResponseDone):
        out.response_done.CopyFrom(pb.ResponseDone(response_id=ev.response_id, status=ev.status,
                                                   usage=_usage(ev.usage), item=item_to_proto(ev.item),
                                                   reason=ev.reason))
    elif isinstance(ev, Failure):
        out.error.CopyFrom(pb.SessionError(code=ev.code, message=ev.message, param=ev.param, event_id=ev.event_id))
    else:
        raise TypeError(f"no session event for {type(ev).__name__}")
    return out


def _config(s: State) -> pb.SessionConfig:
    detection = s.turn_detection and pb.TurnDetection(**dataclasses.asdict(s.turn_detection))  # same field names
    c = pb.SessionConfig(model=s.model, instructions=s.instructions, voice=s.voice,
                         input_sample_rate=s.input_sample_rate, no_turn_detection=s.turn_detection is None,
                         output_modalities=[_MODALITY_PB[m] for m in s.output_modalities], turn_detection=detection)
    if s.params:
        c.params.update(dict(s.params))
    return c


def item_to_proto(item: Item) -> pb.SessionItem:
    # an audio part is named, not echoed: the client sent its bytes
    content = [cpb.ContentPart(audio=cpb.MediaPart(mime_type="audio/pcm")) if isinstance(p, Clip)
               else cpb.ContentPart(text=p) for p in item.parts]
    return pb.SessionItem(id=item.id, previous_item_id=item.previous_item_id, role=item.role, content=content,
                          status=item.status)


def _output(ev, out: pb.ResponseOutput) -> None:
    out.response_id, out.item_id = ev.response_id, ev.item_id
    if isinstance(ev, RawOut):
        out.raw.CopyFrom(ev.value)
        return
    if isinstance(ev, AudioOut):
        out.audio.CopyFrom(cpb.AudioChunk(samples=ev.samples, sample_rate=ev.sample_rate,
                                          format=cpb.AUDIO_FORMAT_PCM_F32LE, sequence_number=ev.sequence_number,
                                          num_samples=ev.num_samples))
        return
    delta = cpb.TextDelta(token_ids=list(ev.token_ids), text=ev.text)
    (out.transcript if ev.transcript else out.text).CopyFrom(delta)


def _usage(u: Usage) -> cpb.Usage:
    return cpb.Usage(prompt_tokens=u.prompt_tokens, cached_prompt_tokens=u.cached_prompt_tokens,
                     completion_tokens=u.completion_tokens, audio_seconds=u.audio_seconds,
                     time_to_first_audio_ms=u.time_to_first_audio_ms, context_id=u.context_id)
