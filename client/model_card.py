"""ListModels in plain data: what a served model takes and makes, its voices and params."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParamCard:
    name: str
    type: str              # "int", "float", "bool", "string" or "ids"
    default: Any           # None: optional
    min: float | None
    max: float | None
    exclusive_min: bool
    help: str


@dataclass(frozen=True)
class ModelCard:
    name: str
    output_modalities: tuple[str, ...]   # "text", "audio", "image"
    accepts_text: bool
    voices: tuple[str, ...]
    voice_param: str                     # the params key naming the voice; "" without voices
    params: dict[str, ParamCard]
    sample_rate: int                     # of its audio; 0 without audio

    def makes(self, modality: str) -> bool:
        return modality in self.output_modalities


def cards_from_proto(reply) -> dict[str, ModelCard]:
    """A ListModelsResponse as name -> ModelCard."""
    from google.protobuf.json_format import MessageToDict

    from protos.starmesh.v1 import conductor_pb2 as pb

    def modality(value: int) -> str:
        return pb.Modality.Name(value).removeprefix("MODALITY_").lower()

    def param(p) -> ParamCard:
        default = MessageToDict(p.default_value) if p.HasField("default_value") else None
        return ParamCard(p.name, p.type, default, p.min if p.HasField("min") else None,
                         p.max if p.HasField("max") else None, p.exclusive_min, p.help)

    return {m.name: ModelCard(m.name, tuple(modality(v) for v in m.output_modalities), m.accepts_text,
                              tuple(m.voices), m.voice_param, {p.name: param(p) for p in m.params}, m.sample_rate)
            for m in reply.models}
