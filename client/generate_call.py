"""One Generate request in plain data, and its protobuf: what a front end builds from
its own request format (the HTTP gateway's OpenAI bodies) without touching protobuf.

    GenerateCall("qwen3-omni", messages=(Message("user", "Hi"),), output_modalities=("text",))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

MODALITIES = ("text", "audio", "image")
MEDIA_KINDS = ("audio", "image", "video")  # ContentPart's media fields


@dataclass(frozen=True)
class Media:
    """An encoded clip, image or video, as its file's bytes (the server reads the format)."""
    kind: str              # "audio" (WAV), "image" (PNG, JPEG) or "video" (animated GIF)
    data: bytes
    mime_type: str = ""    # optional; one that disagrees with the bytes is refused

    def __post_init__(self) -> None:
        if self.kind not in MEDIA_KINDS:
            raise ValueError(f"media.kind must be one of {list(MEDIA_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class Message:
    role: str                          # "system", "user" or "assistant"
    content: tuple[str | Media, ...]   # text and media parts, in prompt order

    def __post_init__(self) -> None:
        content = (self.content,) if isinstance(self.content, str) else tuple(self.content)
        object.__setattr__(self, "content", content)


@dataclass(frozen=True)
class GenerateCall:
    """model: a served name; the prompt is `text`, `messages` or `input_ids` (one of
    them, which the conductor checks); params: ModelInfo.params keys; output_modalities:
    what to send back (empty: everything the model makes)."""

    model: str
    text: str = ""
    messages: tuple[Message, ...] = ()
    input_ids: tuple[int, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    output_modalities: tuple[str, ...] = ()
    request_id: str = ""

    def __post_init__(self) -> None:
        for i, m in enumerate(self.output_modalities):
            if m not in MODALITIES:
                raise ValueError(f"output_modalities[{i}] is {m!r}; one of {list(MODALITIES)}")
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "input_ids", tuple(self.input_ids))
        object.__setattr__(self, "output_modalities", tuple(self.output_modalities))

    def to_proto(self):
        from protos.starmesh.v1 import conductor_pb2 as pb

        req = pb.GenerateRequest(model=self.model, request_id=self.request_id, text=self.text,
                                 input_ids=list(self.input_ids),
                                 output_modalities=[pb.Modality.Value(f"MODALITY_{m.upper()}")
                                                    for m in self.output_modalities])
        req.messages.extend(message_proto(m) for m in self.messages)
        req.params.update(dict(self.params))
        return req


def message_proto(m: Message):
    """A Message as a starmesh.v1.ChatMessage, its parts in order."""
    from protos.starmesh.v1 import conductor_pb2 as pb

    parts = [pb.ContentPart(**{part.kind: pb.MediaPart(data=part.data, mime_type=part.mime_type)})
             if isinstance(part, Media) else pb.ContentPart(text=part) for part in m.content]
    return pb.ChatMessage(role=m.role, content=parts)
