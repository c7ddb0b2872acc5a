"""What a model gives the shared encoder service: its towers.

A model's encoder hook (cluster/registry.py: `hooks={"encoder": "module:callable"}`) is
called with the checkpoint directory and returns an EncoderHook when the checkpoint has
towers of that model, else None. Each tower encodes some media kinds; the service batches
every queued part of one tower (of every request, of every model sharing the service)
into one forward.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Protocol

from core.errors import InvalidArgument
from services.encoder.media_list import MEDIA_KINDS, EncodedPart


class Tower(Protocol):
    kinds: tuple[str, ...]  # the media kinds it encodes (of MEDIA_KINDS)

    def prepare(self, kind: str, data: bytes, field: str) -> Any:
        """A part's file bytes -> the tower's input (decoded, features extracted); bad media
        raises InvalidArgument naming `field`. Runs at open, before any batch."""

    def run(self, payloads: list[Any]) -> list[EncodedPart]:
        """One forward over prepared payloads -> one EncodedPart each, in order, each its
        solo result."""


TowerLoader = Callable[[str, str], Tower]  # (dtype, device) -> the loaded tower


@dataclass(frozen=True)
class EncoderHook:
    """towers: tower name ("audio", "vision", ...) -> its loader; `starmesh serve encoder
    --option towers=audio` loads only the towers it names."""

    towers: Mapping[str, TowerLoader]

    def __post_init__(self) -> None:
        if not self.towers:
            raise InvalidArgument("EncoderHook.towers is empty")
        object.__setattr__(self, "towers", MappingProxyType(dict(self.towers)))


def kinds_of(towers: Mapping[str, Tower]) -> dict[str, str]:
    """media kind -> the name of the tower that encodes it; an error when two towers take one kind."""
    by_kind: dict[str, str] = {}
    for name, tower in towers.items():
        for kind in tower.kinds:
            if kind not in MEDIA_KINDS:
                raise InvalidArgument(f"tower {name!r}: kind {kind!r} is not one of {list(MEDIA_KINDS)}")
            if kind in by_kind:
                raise InvalidArgument(f"towers {by_kind[kind]!r} and {name!r} both encode {kind}")
            by_kind[kind] = name
    return by_kind
