"""A session's inputs and events as plain data: what the conductor's session logic reads
and writes, and what a front end (the gateway's Realtime translation) sends and reads.
The gRPC edges convert them from and to starmesh.v1 session messages (the conductor's:
conductor.session_proto; a client's: client.session_proto); nothing here knows protobuf.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

TEXT, AUDIO = "text", "audio"  # output modalities


@dataclass(frozen=True)
class Clip:
    """Committed input audio: PCM16 little-endian mono (sample_rate 0: not stated, as in
    an item the conductor echoes, whose audio the client sent)."""
    pcm: bytes
    sample_rate: int


@dataclass(frozen=True)
class Item:
    """A conversation item. parts: text (str) or Clip; an assistant's: its text."""
    id: str
    role: str
    parts: tuple = ()
    status: str = "completed"
    previous_item_id: str = ""


@dataclass(frozen=True)
class TurnDetection:
    """Server VAD (conductor.session_vad): 0 fields take their defaults."""
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = False
    interrupt_response: bool = False

    @classmethod
    def with_defaults(cls, threshold: float = 0.0, prefix_padding_ms: int = 0, silence_duration_ms: int = 0,
                      create_response: bool = False, interrupt_response: bool = False) -> "TurnDetection":
        """Fields as a message carries them: 0 is unset, and takes the default."""
        return cls(threshold or cls.threshold, prefix_padding_ms or cls.prefix_padding_ms,
                   silence_duration_ms or cls.silence_duration_ms, create_response, interrupt_response)


@dataclass(frozen=True)
class Settings:
    """A configure input: None / empty fields leave the session's value as it is."""
    model: str = ""
    instructions: str | None = None
    output_modalities: tuple[str, ...] = ()
    voice: str = ""
    turn_detection: TurnDetection | None = None
    no_turn_detection: bool = False
    input_sample_rate: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class State:
    """What a session stands on (defaults filled in)."""
    model: str
    instructions: str = ""
    output_modalities: tuple[str, ...] = (AUDIO,)
    voice: str = ""
    turn_detection: TurnDetection | None = None
    input_sample_rate: int = 24000
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Truncate:
    item_id: str
    content_index: int = 0
    audio_end_ms: int = 0


@dataclass(frozen=True)
class ResponseRequest:
    output_modalities: tuple[str, ...] = ()
    instructions: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    raw_outputs: tuple[str, ...] = ()  # walk outputs also sent as they come (RawOut), e.g. "codes"


@dataclass(frozen=True)
class Input:
    """One client input: kind is the SessionInput oneof's name (configure, append_audio,
    commit_audio, clear_audio, create_item, truncate_item, delete_item, create_response,
    cancel_response), value its content: Settings, bytes, True, True, Item, Truncate,
    str, ResponseRequest, str."""
    event_id: str
    kind: str
    value: Any = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    audio_seconds: float = 0.0
    time_to_first_audio_ms: float = 0.0
    context_id: str = ""


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionState:
    session_id: str
    state: State
    created: bool


@dataclass(frozen=True)
class Speech:
    started: bool
    audio_ms: int
    item_id: str


@dataclass(frozen=True)
class Committed:
    item_id: str
    previous_item_id: str


@dataclass(frozen=True)
class Cleared:
    pass


@dataclass(frozen=True)
class ItemEvent:
    """item_added (done False) or item_done (done True)."""
    item: Item
    done: bool


@dataclass(frozen=True)
class Truncated:
    truncate: Truncate


@dataclass(frozen=True)
class Deleted:
    item_id: str


@dataclass(frozen=True)
class ResponseCreated:
    response_id: str
    item_id: str


@dataclass(frozen=True)
class TextOut:
    """Text of a response: its text (TEXT output) or the words of its audio (transcript)."""
    response_id: str
    item_id: str
    token_ids: tuple[int, ...]
    text: str
    transcript: bool


@dataclass(frozen=True)
class AudioOut:
    """float32 little-endian samples of the answer's audio."""
    response_id: str
    item_id: str
    samples: bytes
    sample_rate: int
    sequence_number: int
    num_samples: int


@dataclass(frozen=True)
class RawOut:
    """A walk output the response asked for by name; value: the edge's own tensor message,
    passed through untouched."""
    response_id: str
    item_id: str
    value: Any


@dataclass(frozen=True)
class ResponseDone:
    response_id: str
    status: str               # "completed", "cancelled", "incomplete" or "failed"
    usage: Usage | None       # None: the message carried none
    item: Item
    reason: str = ""


@dataclass(frozen=True)
class Failure:
    """A bad input: the session lives on. code: a gRPC status name."""
    code: str
    message: str
    param: str = ""
    event_id: str = ""
