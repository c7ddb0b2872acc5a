"""Shapes of the V-JEPA 2 encoder and AC predictor, validated once.

EncoderConfig reads a transformers VJEPA2Model `config.json`; PredictorConfig is the
AC predictor's own `config.json` (field names follow the upstream constructor)."""
from __future__ import annotations

from dataclasses import dataclass, fields

from core.errors import InvalidArgument
from engine.models.vjepa2_ac.rope import axis_dim


def _positive(owner: str, **values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidArgument(f"{owner}.{name} must be a positive integer, got {value!r}")


def _pick(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class EncoderConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    patch_size: int = 16
    tubelet_size: int = 2
    crop_size: int = 256
    frames_per_clip: int = 64
    in_chans: int = 3
    mlp_ratio: float = 4.0
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True
    hidden_act: str = "gelu"

    def __post_init__(self) -> None:
        _positive("encoder", hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
                  num_attention_heads=self.num_attention_heads, patch_size=self.patch_size,
                  tubelet_size=self.tubelet_size, crop_size=self.crop_size, in_chans=self.in_chans)
        if self.hidden_size % self.num_attention_heads:
            raise InvalidArgument(f"encoder.hidden_size {self.hidden_size} is not a multiple of "
                                  f"num_attention_heads {self.num_attention_heads}")
        if self.crop_size % self.patch_size:
            raise InvalidArgument(f"encoder.crop_size {self.crop_size} is not a multiple of patch_size")
        if self.hidden_act != "gelu":
            raise InvalidArgument(f"encoder.hidden_act {self.hidden_act!r}: only gelu is supported")
        if axis_dim(self.head_dim) == 0:
            raise InvalidArgument(f"encoder head_dim {self.head_dim} is too small for a 3D rotary embedding")

    @classmethod
    def from_hf(cls, data: dict) -> "EncoderConfig":
        return cls(**_pick(cls, data))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def grid_size(self) -> int:
        return self.crop_size // self.patch_size


@dataclass(frozen=True)
class PredictorConfig:
    """embed_dim: the encoder's width (input and output features); predictor_embed_dim:
    the predictor's own width. grid_height x grid_width patches per timestep;
    max_timesteps: the longest sequence (context timesteps + horizon - 1) the predictor
    serves, upstream's num_frames // tubelet_size; with per-frame encoding every context
    frame is one timestep (engine.models.vjepa2_ac.loop)."""

    embed_dim: int
    predictor_embed_dim: int
    depth: int
    num_heads: int
    grid_height: int
    grid_width: int
    max_timesteps: int
    action_embed_dim: int = 7
    mlp_ratio: float = 4.0
    use_extrinsics: bool = False
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        _positive("predictor", embed_dim=self.embed_dim, predictor_embed_dim=self.predictor_embed_dim,
                  depth=self.depth, num_heads=self.num_heads, grid_height=self.grid_height,
                  grid_width=self.grid_width, max_timesteps=self.max_timesteps,
                  action_embed_dim=self.action_embed_dim)
        if self.predictor_embed_dim % self.num_heads:
            raise InvalidArgument(f"predictor.predictor_embed_dim {self.predictor_embed_dim} is not a multiple "
                                  f"of num_heads {self.num_heads}")
        if axis_dim(self.head_dim) == 0:
            raise InvalidArgument(f"predictor head_dim {self.head_dim} is too small for a 3D rotary embedding")

    @classmethod
    def from_dict(cls, data: dict) -> "PredictorConfig":
        return cls(**_pick(cls, data))

    @property
    def head_dim(self) -> int:
        return self.predictor_embed_dim // self.num_heads

    @property
    def num_patches(self) -> int:
        return self.grid_height * self.grid_width

    @property
    def num_cond_tokens(self) -> int:
        """Action, state (and extrinsics) tokens at the head of every timestep."""
        return 3 if self.use_extrinsics else 2

    @property
    def tokens_per_step(self) -> int:
        return self.num_cond_tokens + self.num_patches
