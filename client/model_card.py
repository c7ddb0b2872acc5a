"""ListModels in plain data: what a served model takes and makes, its voices and params.

A client learns a model's specifics here, never from constants of its own: the audio's
sample rate, which outputs carry codec codes or progress, which tensors it takes.

    card = pick_model(cards, makes="image")                # the first image model served
    card = pick_model(cards, takes=("frames", "actions"), gives=("prediction",))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from core.errors import InvalidArgument


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
    inputs: tuple[str, ...] = ()         # walk input names a request's `inputs` may carry
    outputs: Mapping[str, str] = field(default_factory=dict)  # walk output name -> kind ("codes", "progress", ...)

    def makes(self, modality: str) -> bool:
        return modality in self.output_modalities

    def takes(self, names: Iterable[str]) -> bool:
        """Whether every name is one of its walk inputs."""
        return set(names) <= set(self.inputs)

    def gives(self, names: Iterable[str]) -> bool:
        """Whether every name is one of its walk outputs."""
        return set(names) <= set(self.outputs)

    def output_kind(self, name: str) -> str:
        """The declared kind of walk output `name` ("" when undeclared or unknown)."""
        return self.outputs.get(name, "")


def pick_model(cards: Mapping[str, ModelCard], makes: str = "", takes: Iterable[str] = (),
               gives: Iterable[str] = (), field_name: str = "model") -> ModelCard:
    """The first card (in ListModels' order) that makes modality `makes`, takes the
    inputs `takes` and gives the outputs `gives`; InvalidArgument naming `field_name`
    (a CLI's --model) when none does."""
    takes, gives = tuple(takes), tuple(gives)
    for card in cards.values():
        if (not makes or card.makes(makes)) and card.takes(takes) and card.gives(gives):
            return card
    wanted = ", ".join(filter(None, (makes and f"makes {makes}", takes and f"takes {list(takes)}",
                                     gives and f"gives {list(gives)}")))
    raise InvalidArgument(f"{field_name}: no served model {wanted} (served: {list(cards)}); name one")


def cards_from_proto(reply) -> dict[str, ModelCard]:
    """A ListModelsResponse as name -> ModelCard, in the conductor's order."""
    from google.protobuf.json_format import MessageToDict

    from protos.starmesh.v1 import conductor_pb2 as pb

    def modality(value: int) -> str:
        return pb.Modality.Name(value).removeprefix("MODALITY_").lower()

    def param(p) -> ParamCard:
        default = MessageToDict(p.default_value) if p.HasField("default_value") else None
        return ParamCard(p.name, p.type, default, p.min if p.HasField("min") else None,
                         p.max if p.HasField("max") else None, p.exclusive_min, p.help)

    return {m.name: ModelCard(m.name, tuple(modality(v) for v in m.output_modalities), m.accepts_text,
                              tuple(m.voices), m.voice_param, {p.name: param(p) for p in m.params}, m.sample_rate,
                              tuple(m.inputs), {o.name: o.kind for o in m.outputs})
            for m in reply.models}


def param_from_text(spec: ParamCard, text: str):
    """A param's value written as text (a CLI's KEY=VALUE, a multipart form field) read
    as the card's type: "8" -> 8 for an int, "true" -> True for a bool; ValueError saying
    which type. Range and finiteness are the caller's checks (gateway.param_check)."""
    try:
        if spec.type == "int":
            return int(text)
        if spec.type == "float":
            return float(text)
    except ValueError:
        raise ValueError(f"{spec.name} is {'an' if spec.type == 'int' else 'a'} {spec.type}, got {text!r}") from None
    if spec.type == "bool":
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{spec.name} is a bool (true or false), got {text!r}")
        return text.lower() in ("true", "1")
    if spec.type == "ids":
        try:
            return [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise ValueError(f"{spec.name} is a list of ids (1,2,3), got {text!r}") from None
    return text
