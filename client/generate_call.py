"""One Generate request in plain data, and its protobuf: what a front end builds from
its own request format (the HTTP gateway's OpenAI bodies, the CLI's flags) without
touching protobuf. Everything GenerateRequest carries: a prompt (text, chat messages
with media parts, prompt ids, or named tensors), params, what to send back.

    GenerateCall("omni", messages=(Message("user", "Hi"),), output_modalities=("text",))
    GenerateCall("world", inputs={"frames": frames, "actions": actions}, params={"horizon": 4})

Tensor inputs are numpy arrays (or torch tensors, read without importing torch here:
client.tensors); they are converted once, when the call is built, so a bad one is named
then.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from core.errors import InvalidArgument
from core.media_kinds import MEDIA_KINDS  # ContentPart's media fields

MODALITIES = ("text", "audio", "image")


class BadCall(InvalidArgument, ValueError):
    """A call that cannot be sent, naming the bad field. A ValueError too: callers that
    caught ValueError from these dataclasses keep catching it."""


@dataclass(frozen=True)
class Media:
    """An encoded clip, image or video, as its file's bytes (the server reads the format)."""
    kind: str              # "audio" (WAV), "image" (PNG, JPEG) or "video" (animated GIF)
    data: bytes
    mime_type: str = ""    # optional; one that disagrees with the bytes is refused

    def __post_init__(self) -> None:
        if self.kind not in MEDIA_KINDS:
            raise BadCall(f"media.kind must be one of {list(MEDIA_KINDS)}, got {self.kind!r}")
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise BadCall(f"media.data must be the file's bytes, got {type(self.data).__name__}")


@dataclass(frozen=True)
class Message:
    role: str                          # "system", "user" or "assistant"
    content: tuple[str | Media, ...]   # text and media parts, in prompt order

    def __post_init__(self) -> None:
        content = (self.content,) if isinstance(self.content, str) else tuple(self.content)
        for i, part in enumerate(content):
            if not isinstance(part, (str, Media)):
                raise BadCall(f"message.content[{i}] must be text or Media, got {type(part).__name__}")
        object.__setattr__(self, "content", content)


@dataclass(frozen=True)
class GenerateCall:
    """model: a served name (ListModels); the prompt is `text`, `messages`, `input_ids` or
    `inputs` (tensors by walk input name, ModelCard.inputs), which the conductor checks;
    params: ModelCard.params keys; output_modalities: what to send back (empty: everything
    the model makes, its other outputs as tensors); raw_outputs: walk output names sent
    as tensor events (client.events.RawTensor) instead of typed events."""

    model: str
    text: str = ""
    messages: tuple[Message, ...] = ()
    input_ids: tuple[int, ...] = ()
    inputs: Mapping[str, Any] = field(default_factory=dict, compare=False)  # compared as their refs (_refs)
    params: Mapping[str, Any] = field(default_factory=dict)
    output_modalities: tuple[str, ...] = ()
    raw_outputs: tuple[str, ...] = ()
    request_id: str = ""
    # The end user a front end sends this for (sent as metadata, not in the request): with
    # the API key it names the owner of the kept contexts the call makes or continues.
    end_user: str = ""
    _refs: dict = field(init=False, repr=False, default_factory=dict)  # name -> inline TensorRef

    def __post_init__(self) -> None:
        if not self.model:
            raise BadCall("model is empty (a name from ListModels)")
        for i, m in enumerate(self.output_modalities):
            if m not in MODALITIES:
                raise BadCall(f"output_modalities[{i}] is {m!r}; one of {list(MODALITIES)}")
        for i, name in enumerate(self.raw_outputs):
            if not name:
                raise BadCall(f"raw_outputs[{i}] is empty (a walk output name)")
        for name in self.inputs:
            if not name or not isinstance(name, str):
                raise BadCall(f"inputs: {name!r} is not a walk input name")
        for i, m in enumerate(self.messages):
            if not isinstance(m, Message):
                raise BadCall(f"messages[{i}] must be a Message, got {type(m).__name__}")
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "input_ids", tuple(self.input_ids))
        object.__setattr__(self, "output_modalities", tuple(self.output_modalities))
        object.__setattr__(self, "raw_outputs", tuple(self.raw_outputs))
        object.__setattr__(self, "_refs", _tensor_refs(self.inputs))

    def to_proto(self):
        from protos.starmesh.v1 import conductor_pb2 as pb
        from transport.ref_proto import ref_to_proto

        req = pb.GenerateRequest(model=self.model, request_id=self.request_id, text=self.text,
                                 input_ids=list(self.input_ids), raw_outputs=list(self.raw_outputs),
                                 output_modalities=[pb.Modality.Value(f"MODALITY_{m.upper()}")
                                                    for m in self.output_modalities])
        req.messages.extend(message_proto(m) for m in self.messages)
        for name, ref in self._refs.items():
            ref_to_proto(ref, req.inputs.add(name=name).tensor)
        req.params.update(dict(self.params))
        return req


def _tensor_refs(inputs: Mapping[str, Any]) -> dict:
    """name -> inline TensorRef; BadCall naming inputs[name] for a value that is no wire tensor."""
    if not inputs:
        return {}
    from client.tensors import tensor_ref

    refs = {}
    for name, value in inputs.items():
        try:
            refs[name] = tensor_ref(value, f"inputs[{name}]")
        except InvalidArgument as e:
            raise BadCall(str(e)) from None
    return refs


def message_proto(m: Message):
    """A Message as a starmesh.v1.ChatMessage, its parts in order."""
    from protos.starmesh.v1 import conductor_pb2 as pb

    parts = [pb.ContentPart(**{part.kind: pb.MediaPart(data=bytes(part.data), mime_type=part.mime_type)})
             if isinstance(part, Media) else pb.ContentPart(text=part) for part in m.content]
    return pb.ChatMessage(role=m.role, content=parts)
