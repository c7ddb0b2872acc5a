"""SNAC's config.json (the `snac` package's constructor arguments), validated once."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

from core.errors import InvalidArgument

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class SnacConfig:
    sampling_rate: int = 24000
    encoder_dim: int = 48
    encoder_rates: tuple[int, ...] = (2, 4, 8, 8)
    latent_dim: int | None = None           # None: encoder_dim * 2 ** len(encoder_rates)
    decoder_dim: int = 1024
    decoder_rates: tuple[int, ...] = (8, 8, 4, 2)
    attn_window_size: int | None = None     # local attention: not supported (the 24 kHz model has none)
    codebook_size: int = 4096
    codebook_dim: int = 8
    vq_strides: tuple[int, ...] = (4, 2, 1)
    noise: bool = True
    depthwise: bool = True

    def __post_init__(self) -> None:
        for name in ("encoder_rates", "decoder_rates", "vq_strides"):
            value = tuple(int(v) for v in getattr(self, name))
            if not value or min(value) < 1:
                raise InvalidArgument(f"snac config.{name}: positive integers expected, got {list(value)}")
            object.__setattr__(self, name, value)
        if self.latent_dim is None:
            object.__setattr__(self, "latent_dim", self.encoder_dim * 2 ** len(self.encoder_rates))
        if self.attn_window_size is not None:
            raise InvalidArgument(f"snac config.attn_window_size: {self.attn_window_size} (local attention) is not "
                                  "supported; the 24 kHz model has none")
        if math.prod(self.decoder_rates) != self.hop_length:
            raise InvalidArgument(f"snac config.decoder_rates: product {math.prod(self.decoder_rates)} != the hop "
                                  f"{self.hop_length} of encoder_rates")
        if self.decoder_dim % 2 ** len(self.decoder_rates):
            raise InvalidArgument(f"snac config.decoder_dim: {self.decoder_dim} is not divisible by "
                                  f"{2 ** len(self.decoder_rates)} (halved per decoder block)")
        if self.codebook_size < 1 or self.codebook_dim < 1:
            raise InvalidArgument("snac config.codebook_size / codebook_dim must be >= 1")

    @property
    def hop_length(self) -> int:
        return math.prod(self.encoder_rates)

    @property
    def num_levels(self) -> int:
        return len(self.vq_strides)

    def as_json(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}

    @classmethod
    def from_dir(cls, directory: str | Path) -> "SnacConfig":
        path = Path(directory) / CONFIG_FILE
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgument(f"snac checkpoint {directory}: cannot read {CONFIG_FILE}: {e}") from None
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidArgument(f"snac checkpoint {directory}: {CONFIG_FILE} has unknown keys {unknown}")
        return cls(**raw)


def is_snac_dir(directory: str | Path) -> bool:
    """A directory whose config.json is a SNAC config (vq_strides, no model_type)."""
    try:
        raw = json.loads((Path(directory) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and "vq_strides" in raw and "model_type" not in raw
