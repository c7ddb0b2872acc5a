"""One Generate request in plain data, and its protobuf: what a front end builds from
its own request format (the HTTP gateway's OpenAI bodies) without touching protobuf.

    GenerateCall("qwen3-omni", messages=(Message("user", "Hi"),), output_modalities=("text",))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

MODALITIES = ("text", "audio", "image")


@dataclass(frozen=True)
class Message:
    role: str              # "system", "user" or "assistant"
    text: str              # the message's text parts, joined


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
        for m in self.messages:
            req.messages.add(role=m.role).content.add(text=m.text)
        req.params.update(dict(self.params))
        return req
