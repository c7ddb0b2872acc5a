from google.protobuf import struct_pb2 as _struct_pb2
from protos.starmesh.v1 import conductor_pb2 as _conductor_pb2
from protos.starmesh.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionInput(_message.Message):
    __slots__ = ("event_id", "configure", "append_audio", "commit_audio", "clear_audio", "create_item", "truncate_item", "delete_item", "create_response", "cancel_response")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIGURE_FIELD_NUMBER: _ClassVar[int]
    APPEND_AUDIO_FIELD_NUMBER: _ClassVar[int]
    COMMIT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    CLEAR_AUDIO_FIELD_NUMBER: _ClassVar[int]
    CREATE_ITEM_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_ITEM_FIELD_NUMBER: _ClassVar[int]
    DELETE_ITEM_FIELD_NUMBER: _ClassVar[int]
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    configure: SessionConfig
    append_audio: bytes
    commit_audio: bool
    clear_audio: bool
    create_item: SessionItem
    truncate_item: ItemTruncate
    delete_item: str
    create_response: ResponseCreate
    cancel_response: str
    def __init__(self, event_id: _Optional[str] = ..., configure: _Optional[_Union[SessionConfig, _Mapping]] = ..., append_audio: _Optional[bytes] = ..., commit_audio: _Optional[bool] = ..., clear_audio: _Optional[bool] = ..., create_item: _Optional[_Union[SessionItem, _Mapping]] = ..., truncate_item: _Optional[_Union[ItemTruncate, _Mapping]] = ..., delete_item: _Optional[str] = ..., create_response: _Optional[_Union[ResponseCreate, _Mapping]] = ..., cancel_response: _Optional[str] = ...) -> None: ...

class SessionConfig(_message.Message):
    __slots__ = ("model", "instructions", "output_modalities", "voice", "turn_detection", "input_sample_rate", "params", "no_turn_detection")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    TURN_DETECTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    NO_TURN_DETECTION_FIELD_NUMBER: _ClassVar[int]
    model: str
    instructions: str
    output_modalities: _containers.RepeatedScalarFieldContainer[_conductor_pb2.Modality]
    voice: str
    turn_detection: TurnDetection
    input_sample_rate: int
    params: _struct_pb2.Struct
    no_turn_detection: bool
    def __init__(self, model: _Optional[str] = ..., instructions: _Optional[str] = ..., output_modalities: _Optional[_Iterable[_Union[_conductor_pb2.Modality, str]]] = ..., voice: _Optional[str] = ..., turn_detection: _Optional[_Union[TurnDetection, _Mapping]] = ..., input_sample_rate: _Optional[int] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., no_turn_detection: _Optional[bool] = ...) -> None: ...

class TurnDetection(_message.Message):
    __slots__ = ("threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response")
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    PREFIX_PADDING_MS_FIELD_NUMBER: _ClassVar[int]
    SILENCE_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool
    interrupt_response: bool
    def __init__(self, threshold: _Optional[float] = ..., prefix_padding_ms: _Optional[int] = ..., silence_duration_ms: _Optional[int] = ..., create_response: _Optional[bool] = ..., interrupt_response: _Optional[bool] = ...) -> None: ...

class SessionItem(_message.Message):
    __slots__ = ("id", "previous_item_id", "role", "content", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    previous_item_id: str
    role: str
    content: _containers.RepeatedCompositeFieldContainer[_conductor_pb2.ContentPart]
    status: str
    def __init__(self, id: _Optional[str] = ..., previous_item_id: _Optional[str] = ..., role: _Optional[str] = ..., content: _Optional[_Iterable[_Union[_conductor_pb2.ContentPart, _Mapping]]] = ..., status: _Optional[str] = ...) -> None: ...

class ItemTruncate(_message.Message):
    __slots__ = ("item_id", "content_index", "audio_end_ms")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    audio_end_ms: int
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., audio_end_ms: _Optional[int] = ...) -> None: ...

class ResponseCreate(_message.Message):
    __slots__ = ("output_modalities", "instructions", "params", "raw_outputs")
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    RAW_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    output_modalities: _containers.RepeatedScalarFieldContainer[_conductor_pb2.Modality]
    instructions: str
    params: _struct_pb2.Struct
    raw_outputs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, output_modalities: _Optional[_Iterable[_Union[_conductor_pb2.Modality, str]]] = ..., instructions: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., raw_outputs: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("event_id", "session", "speech_started", "speech_stopped", "audio_committed", "audio_cleared", "item_added", "item_done", "item_truncated", "item_deleted", "response_created", "output", "response_done", "error")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STARTED_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STOPPED_FIELD_NUMBER: _ClassVar[int]
    AUDIO_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    AUDIO_CLEARED_FIELD_NUMBER: _ClassVar[int]
    ITEM_ADDED_FIELD_NUMBER: _ClassVar[int]
    ITEM_DONE_FIELD_NUMBER: _ClassVar[int]
    ITEM_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ITEM_DELETED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_CREATED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    session: SessionState
    speech_started: SpeechMark
    speech_stopped: SpeechMark
    audio_committed: ItemMark
    audio_cleared: bool
    item_added: SessionItem
    item_done: SessionItem
    item_truncated: ItemTruncate
    item_deleted: str
    response_created: ResponseMark
    output: ResponseOutput
    response_done: ResponseDone
    error: SessionError
    def __init__(self, event_id: _Optional[str] = ..., session: _Optional[_Union[SessionState, _Mapping]] = ..., speech_started: _Optional[_Union[SpeechMark, _Mapping]] = ..., speech_stopped: _Optional[_Union[SpeechMark, _Mapping]] = ..., audio_committed: _Optional[_Union[ItemMark, _Mapping]] = ..., audio_cleared: _Optional[bool] = ..., item_added: _Optional[_Union[SessionItem, _Mapping]] = ..., item_done: _Optional[_Union[SessionItem, _Mapping]] = ..., item_truncated: _Optional[_Union[ItemTruncate, _Mapping]] = ..., item_deleted: _Optional[str] = ..., response_created: _Optional[_Union[ResponseMark, _Mapping]] = ..., output: _Optional[_Union[ResponseOutput, _Mapping]] = ..., response_done: _Optional[_Union[ResponseDone, _Mapping]] = ..., error: _Optional[_Union[SessionError, _Mapping]] = ...) -> None: ...

class SessionState(_message.Message):
    __slots__ = ("session_id", "config", "created")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    config: SessionConfig
    created: bool
    def __init__(self, session_id: _Optional[str] = ..., config: _Optional[_Union[SessionConfig, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class SpeechMark(_message.Message):
    __slots__ = ("audio_ms", "item_id")
    AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    audio_ms: int
    item_id: str
    def __init__(self, audio_ms: _Optional[int] = ..., item_id: _Optional[str] = ...) -> None: ...

class ItemMark(_message.Message):
    __slots__ = ("item_id", "previous_item_id")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    previous_item_id: str
    def __init__(self, item_id: _Optional[str] = ..., previous_item_id: _Optional[str] = ...) -> None: ...

class ResponseMark(_message.Message):
    __slots__ = ("response_id", "item_id")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    item_id: str
    def __init__(self, response_id: _Optional[str] = ..., item_id: _Optional[str] = ...) -> None: ...

class ResponseOutput(_message.Message):
    __slots__ = ("response_id", "item_id", "text", "audio", "transcript", "raw")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    RAW_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    item_id: str
    text: _conductor_pb2.TextDelta
    audio: _conductor_pb2.AudioChunk
    transcript: _conductor_pb2.TextDelta
    raw: _tensor_pb2.NamedTensor
    def __init__(self, response_id: _Optional[str] = ..., item_id: _Optional[str] = ..., text: _Optional[_Union[_conductor_pb2.TextDelta, _Mapping]] = ..., audio: _Optional[_Union[_conductor_pb2.AudioChunk, _Mapping]] = ..., transcript: _Optional[_Union[_conductor_pb2.TextDelta, _Mapping]] = ..., raw: _Optional[_Union[_tensor_pb2.NamedTensor, _Mapping]] = ...) -> None: ...

class ResponseDone(_message.Message):
    __slots__ = ("response_id", "status", "usage", "item", "reason")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    status: str
    usage: _conductor_pb2.Usage
    item: SessionItem
    reason: str
    def __init__(self, response_id: _Optional[str] = ..., status: _Optional[str] = ..., usage: _Optional[_Union[_conductor_pb2.Usage, _Mapping]] = ..., item: _Optional[_Union[SessionItem, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class SessionError(_message.Message):
    __slots__ = ("code", "message", "param", "event_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    param: str
    event_id: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., param: _Optional[str] = ..., event_id: _Optional[str] = ...) -> None: ...
