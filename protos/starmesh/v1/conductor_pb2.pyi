from google.protobuf import struct_pb2 as _struct_pb2
from protos.starmesh.v1 import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerateRequest(_message.Message):
    __slots__ = ("model", "request_id", "text", "input_ids", "inputs", "params", "outputs")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    request_id: str
    text: str
    input_ids: _containers.RepeatedScalarFieldContainer[int]
    inputs: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.NamedTensor]
    params: _struct_pb2.Struct
    outputs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[str] = ..., request_id: _Optional[str] = ..., text: _Optional[str] = ..., input_ids: _Optional[_Iterable[int]] = ..., inputs: _Optional[_Iterable[_Union[_tensor_pb2.NamedTensor, _Mapping]]] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., outputs: _Optional[_Iterable[str]] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("token_ids", "text")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("pcm", "sample_rate", "index")
    PCM_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    pcm: _tensor_pb2.TensorRef
    sample_rate: int
    index: int
    def __init__(self, pcm: _Optional[_Union[_tensor_pb2.TensorRef, _Mapping]] = ..., sample_rate: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("rgb", "index")
    RGB_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    rgb: _tensor_pb2.TensorRef
    index: int
    def __init__(self, rgb: _Optional[_Union[_tensor_pb2.TensorRef, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("prompt_tokens", "completion_tokens", "metrics")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    metrics: _struct_pb2.Struct
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

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

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "walks", "outputs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WALKS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    walks: _containers.RepeatedScalarFieldContainer[str]
    outputs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., walks: _Optional[_Iterable[str]] = ..., outputs: _Optional[_Iterable[str]] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...
