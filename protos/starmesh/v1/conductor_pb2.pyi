from google.protobuf import struct_pb2 as _struct_pb2
from protos.starmesh.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Modality(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODALITY_UNSPECIFIED: _ClassVar[Modality]
    MODALITY_TEXT: _ClassVar[Modality]
    MODALITY_AUDIO: _ClassVar[Modality]
    MODALITY_IMAGE: _ClassVar[Modality]

class AudioFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIO_FORMAT_UNSPECIFIED: _ClassVar[AudioFormat]
    AUDIO_FORMAT_PCM_F32LE: _ClassVar[AudioFormat]
MODALITY_UNSPECIFIED: Modality
MODALITY_TEXT: Modality
MODALITY_AUDIO: Modality
MODALITY_IMAGE: Modality
AUDIO_FORMAT_UNSPECIFIED: AudioFormat
AUDIO_FORMAT_PCM_F32LE: AudioFormat

class ContentPart(_message.Message):
    __slots__ = ("text", "audio", "image", "video")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FIELD_NUMBER: _ClassVar[int]
    text: str
    audio: MediaPart
    image: MediaPart
    video: MediaPart
    def __init__(self, text: _Optional[str] = ..., audio: _Optional[_Union[MediaPart, _Mapping]] = ..., image: _Optional[_Union[MediaPart, _Mapping]] = ..., video: _Optional[_Union[MediaPart, _Mapping]] = ...) -> None: ...

class MediaPart(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    def __init__(self, role: _Optional[str] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model", "request_id", "text", "input_ids", "inputs", "params", "raw_outputs", "output_modalities", "messages")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    RAW_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    model: str
    request_id: str
    text: str
    input_ids: _containers.RepeatedScalarFieldContainer[int]
    inputs: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.NamedTensor]
    params: _struct_pb2.Struct
    raw_outputs: _containers.RepeatedScalarFieldContainer[str]
    output_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    def __init__(self, model: _Optional[str] = ..., request_id: _Optional[str] = ..., text: _Optional[str] = ..., input_ids: _Optional[_Iterable[int]] = ..., inputs: _Optional[_Iterable[_Union[_tensor_pb2.NamedTensor, _Mapping]]] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., raw_outputs: _Optional[_Iterable[str]] = ..., output_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("token_ids", "text")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("samples", "sample_rate", "format", "sequence_number", "num_samples")
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: bytes
    sample_rate: int
    format: AudioFormat
    sequence_number: int
    num_samples: int
    def __init__(self, samples: _Optional[bytes] = ..., sample_rate: _Optional[int] = ..., format: _Optional[_Union[AudioFormat, str]] = ..., sequence_number: _Optional[int] = ..., num_samples: _Optional[int] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("data", "mime_type", "width", "height", "index")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    width: int
    height: int
    index: int
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class StepEvent(_message.Message):
    __slots__ = ("node", "step", "num_steps")
    NODE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    NUM_STEPS_FIELD_NUMBER: _ClassVar[int]
    node: str
    step: int
    num_steps: int
    def __init__(self, node: _Optional[str] = ..., step: _Optional[int] = ..., num_steps: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "metrics", "audio_seconds", "time_to_first_audio_ms", "real_time_factor", "latency_ms", "context_id", "cached_prompt_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    REAL_TIME_FACTOR_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    metrics: _struct_pb2.Struct
    audio_seconds: float
    time_to_first_audio_ms: float
    real_time_factor: float
    latency_ms: float
    context_id: str
    cached_prompt_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., audio_seconds: _Optional[float] = ..., time_to_first_audio_ms: _Optional[float] = ..., real_time_factor: _Optional[float] = ..., latency_ms: _Optional[float] = ..., context_id: _Optional[str] = ..., cached_prompt_tokens: _Optional[int] = ...) -> None: ...

class GenerateEvent(_message.Message):
    __slots__ = ("request_id", "text", "audio", "image", "tensor", "step", "usage")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: TextDelta
    audio: AudioChunk
    image: Image
    tensor: _tensor_pb2.NamedTensor
    step: StepEvent
    usage: Usage
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[_Union[TextDelta, _Mapping]] = ..., audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., image: _Optional[_Union[Image, _Mapping]] = ..., tensor: _Optional[_Union[_tensor_pb2.NamedTensor, _Mapping]] = ..., step: _Optional[_Union[StepEvent, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class GenerateEventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[GenerateEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[GenerateEvent, _Mapping]]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ParamInfo(_message.Message):
    __slots__ = ("name", "type", "default_value", "min", "max", "exclusive_min", "help")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_MIN_FIELD_NUMBER: _ClassVar[int]
    HELP_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    default_value: _struct_pb2.Value
    min: float
    max: float
    exclusive_min: bool
    help: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., default_value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., exclusive_min: _Optional[bool] = ..., help: _Optional[str] = ...) -> None: ...

class OutputInfo(_message.Message):
    __slots__ = ("name", "kind", "event")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    event: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., event: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "walks", "output_modalities", "inputs", "accepts_text", "voices", "voice_param", "params", "outputs", "sample_rate")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WALKS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_TEXT_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    VOICE_PARAM_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    walks: _containers.RepeatedScalarFieldContainer[str]
    output_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    inputs: _containers.RepeatedScalarFieldContainer[str]
    accepts_text: bool
    voices: _containers.RepeatedScalarFieldContainer[str]
    voice_param: str
    params: _containers.RepeatedCompositeFieldContainer[ParamInfo]
    outputs: _containers.RepeatedCompositeFieldContainer[OutputInfo]
    sample_rate: int
    def __init__(self, name: _Optional[str] = ..., walks: _Optional[_Iterable[str]] = ..., output_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ..., inputs: _Optional[_Iterable[str]] = ..., accepts_text: _Optional[bool] = ..., voices: _Optional[_Iterable[str]] = ..., voice_param: _Optional[str] = ..., params: _Optional[_Iterable[_Union[ParamInfo, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[OutputInfo, _Mapping]]] = ..., sample_rate: _Optional[int] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...
