"""The shapes of Qwen3-Omni's audio and vision towers, read from a checkpoint's config.json
(`thinker_config.audio_config` / `thinker_config.vision_config`)."""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import InvalidArgument

AUDIO_PREFIX = "thinker.audio_tower."
VISION_PREFIX = "thinker.visual."


def _positive(obj, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(obj, name) <= 0:
            raise InvalidArgument(f"{type(obj).__name__}.{name} must be > 0, got {getattr(obj, name)}")


@dataclass(frozen=True)
class AudioEncoderConfig:
    num_mel_bins: int
    d_model: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    output_dim: int
    downsample_hidden_size: int
    max_source_positions: int
    n_window: int          # half a convolution chunk, in mel frames (a chunk is 2 * n_window)
    n_window_infer: int    # attention window, in mel frames (a multiple of 2 * n_window)
    scale_embedding: bool = False

    def __post_init__(self) -> None:
        _positive(self, ("num_mel_bins", "d_model", "num_layers", "num_heads", "ffn_dim", "output_dim",
                         "downsample_hidden_size", "max_source_positions", "n_window", "n_window_infer"))
        if self.d_model % self.num_heads:
            raise InvalidArgument(f"AudioEncoderConfig.num_heads {self.num_heads} must divide d_model {self.d_model}")
        if self.n_window_infer % (2 * self.n_window):
            raise InvalidArgument(f"AudioEncoderConfig.n_window_infer {self.n_window_infer} must be a multiple "
                                  f"of 2 * n_window ({2 * self.n_window})")

    @property
    def conv_out_features(self) -> int:
        """Channels x mel bins after three stride-2 convolutions."""
        bins = (((self.num_mel_bins + 1) // 2 + 1) // 2 + 1) // 2
        return self.downsample_hidden_size * bins


@dataclass(frozen=True)
class VisionEncoderConfig:
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int
    patch_size: int
    temporal_patch_size: int
    spatial_merge_size: int
    in_channels: int
    num_position_embeddings: int
    rope_theta: float
    deepstack_indexes: tuple[int, ...] = ()  # blocks whose output also feeds the thinker's first layers

    def __post_init__(self) -> None:
        _positive(self, ("depth", "hidden_size", "intermediate_size", "num_heads", "out_hidden_size", "patch_size",
                         "temporal_patch_size", "spatial_merge_size", "in_channels", "num_position_embeddings"))
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 4:
            raise InvalidArgument(f"VisionEncoderConfig.num_heads {self.num_heads}: head_dim must divide "
                                  f"hidden_size {self.hidden_size} and be a multiple of 4 (2-D rope)")
        side = int(self.num_position_embeddings ** 0.5)
        if side * side != self.num_position_embeddings:
            raise InvalidArgument(f"VisionEncoderConfig.num_position_embeddings {self.num_position_embeddings} "
                                  "is not a square")
        bad = [i for i in self.deepstack_indexes if not 0 <= i < self.depth]
        if bad:
            raise InvalidArgument(f"VisionEncoderConfig.deepstack_indexes {bad} outside 0..{self.depth - 1}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def merge_unit(self) -> int:
        """Patches per thinker token."""
        return self.spatial_merge_size ** 2

    @property
    def patch_dim(self) -> int:
        """Values per flattened patch (the image processor's pixel_values width)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2


def _thinker(cfg: dict, key: str, where: str) -> dict:
    sub = (cfg.get("thinker_config") or {}).get(key)
    if not isinstance(sub, dict):
        raise InvalidArgument(f"{where}: checkpoint lacks thinker_config.{key}")
    return sub


def audio_config_from_hf(cfg: dict, where: str = "config.json") -> AudioEncoderConfig:
    a = _thinker(cfg, "audio_config", where)
    if a.get("activation_function", "gelu") != "gelu":
        raise InvalidArgument(f"{where}: audio activation_function {a['activation_function']!r} is not supported")
    try:
        return AudioEncoderConfig(
            num_mel_bins=int(a.get("num_mel_bins", 128)), d_model=int(a["d_model"]),
            num_layers=int(a["encoder_layers"]), num_heads=int(a["encoder_attention_heads"]),
            ffn_dim=int(a["encoder_ffn_dim"]), output_dim=int(a["output_dim"]),
            downsample_hidden_size=int(a.get("downsample_hidden_size", 480)),
            max_source_positions=int(a.get("max_source_positions", 1500)), n_window=int(a.get("n_window", 50)),
            n_window_infer=int(a.get("n_window_infer", 800)), scale_embedding=bool(a.get("scale_embedding", False)))
    except KeyError as e:
        raise InvalidArgument(f"{where}: audio_config lacks {e.args[0]!r}") from None


def vision_config_from_hf(cfg: dict, where: str = "config.json") -> VisionEncoderConfig:
    v = _thinker(cfg, "vision_config", where)
    if v.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise InvalidArgument(f"{where}: vision hidden_act {v['hidden_act']!r} is not supported")
    rope = v.get("rope_parameters") or {}
    try:
        return VisionEncoderConfig(
            depth=int(v["depth"]), hidden_size=int(v["hidden_size"]), intermediate_size=int(v["intermediate_size"]),
            num_heads=int(v["num_heads"]), out_hidden_size=int(v["out_hidden_size"]),
            patch_size=int(v.get("patch_size", 16)), temporal_patch_size=int(v.get("temporal_patch_size", 2)),
            spatial_merge_size=int(v.get("spatial_merge_size", 2)), in_channels=int(v.get("in_channels", 3)),
            num_position_embeddings=int(v.get("num_position_embeddings", 2304)),
            rope_theta=float(rope.get("rope_theta", 10000.0)),
            deepstack_indexes=tuple(int(i) for i in v.get("deepstack_visual_indexes") or ()))
    except KeyError as e:
        raise InvalidArgument(f"{where}: vision_config lacks {e.args[0]!r}") from None
