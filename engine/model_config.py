"""What a model is: the frozen, validated description every model family is built from.

`model_config_from_hf` reads a Hugging Face `config.json` dict (transformers 4 style
`rope_theta`/`rope_scaling` or transformers 5 style `rope_parameters`) into a
`ModelConfig`. Anything this engine cannot run exactly is rejected here, naming the
field, rather than producing silently wrong logits later.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument

FAMILIES = ("qwen3", "qwen3_moe", "llama")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ROPE_TYPES = ("default", "llama3")


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1 frequency-dependent rope scaling (`rope_type: "llama3"`)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position: int

    def __post_init__(self) -> None:
        if self.factor <= 0 or self.original_max_position <= 0:
            raise InvalidArgument("rope scaling: factor and original_max_position_embeddings must be > 0")
        if self.high_freq_factor <= self.low_freq_factor:
            raise InvalidArgument("rope scaling: high_freq_factor must be > low_freq_factor")


@dataclass(frozen=True)
class ModelConfig:
    family: str                    # "qwen3" | "qwen3_moe" | "llama"
    vocab_size: int
    hidden_size: int
    intermediate_size: int         # dense MLP width (also MoE models' mlp_only layers)
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_eps: float
    tie_word_embeddings: bool
    max_position: int
    dtype: str = "float32"         # a key of DTYPES
    rope_scaling: Llama3RopeScaling | None = None
    qk_norm: bool = False          # per-head RMSNorm on q and k (Qwen3)
    attention_bias: bool = False   # bias on q/k/v/o projections
    mlp_bias: bool = False
    # Mixture of experts (num_experts == 0: dense model)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    shared_expert_intermediate_size: int = 0   # 0: no shared expert
    # Where the text model's tensors live in the checkpoint ("thinker." for Qwen3-Omni).
    weight_prefix: str = ""
    eos_token_ids: tuple[int, ...] = ()
    # Multimodal rope (Qwen3-Omni's thinker): frequencies per axis (time, height, width),
    # interleaved; () for 1-D rope. Text-only positions reduce it to 1-D rope exactly.
    mrope_section: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise InvalidArgument(f"ModelConfig.family {self.family!r} is not one of {FAMILIES}")
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"ModelConfig.dtype {self.dtype!r} is not one of {tuple(DTYPES)}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"ModelConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise InvalidArgument(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise InvalidArgument(f"ModelConfig.head_dim must be even for rope, got {self.head_dim}")
        if self.rope_theta <= 0 or self.rms_eps <= 0:
            raise InvalidArgument("ModelConfig.rope_theta and rms_eps must be > 0")
        if self.mrope_section and (len(self.mrope_section) != 3 or sum(self.mrope_section) > self.head_dim // 2
                                   or min(self.mrope_section) < 0):
            raise InvalidArgument(f"ModelConfig.mrope_section {self.mrope_section} must be 3 sizes >= 0 summing "
                                  f"to at most head_dim / 2 = {self.head_dim // 2}")
        self._validate_moe()

    def _validate_moe(self) -> None:
        if self.num_experts == 0:
            return
        if not 0 < self.num_experts_per_tok <= self.num_experts:
            raise InvalidArgument(
                f"ModelConfig.num_experts_per_tok must be in 1..{self.num_experts}, got {self.num_experts_per_tok}")
        if self.moe_intermediate_size <= 0 or self.decoder_sparse_step <= 0:
            raise InvalidArgument("ModelConfig.moe_intermediate_size and decoder_sparse_step must be > 0")
        bad = [i for i in self.mlp_only_layers if not 0 <= i < self.num_layers]
        if bad:
            raise InvalidArgument(f"ModelConfig.mlp_only_layers has layers outside 0..{self.num_layers - 1}: {bad}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def is_moe_layer(self, layer: int) -> bool:
        """HF rule: experts unless listed in mlp_only_layers; every decoder_sparse_step-th layer."""
        return (self.num_experts > 0 and layer not in self.mlp_only_layers
                and (layer + 1) % self.decoder_sparse_step == 0)


def _rope(cfg: dict, where: str) -> tuple[float, Llama3RopeScaling | None]:
    """(theta, scaling) from either `rope_parameters` (transformers 5) or `rope_theta`/`rope_scaling`."""
    params = dict(cfg.get("rope_scaling") or {})
    params.update(cfg.get("rope_parameters") or {})
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise InvalidArgument(f"{where}: rope_type {rope_type!r} is not supported (supported: {ROPE_TYPES})")
    factor = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if factor != 1.0:
        raise InvalidArgument(f"{where}: partial_rotary_factor {factor} is not supported (only 1.0)")
    if rope_type == "default":
        return float(theta), None
    try:
        scaling = Llama3RopeScaling(
            factor=float(params["factor"]), low_freq_factor=float(params["low_freq_factor"]),
            high_freq_factor=float(params["high_freq_factor"]),
            original_max_position=int(params.get("original_max_position_embeddings",
                                                 cfg.get("max_position_embeddings", 0))))
    except KeyError as e:
        raise InvalidArgument(f"{where}: llama3 rope scaling lacks {e.args[0]!r}") from None
    return float(theta), scaling


def _reject_unsupported(cfg: dict, where: str) -> None:
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise InvalidArgument(f"{where}: hidden_act {act!r} is not supported (only 'silu')")
    layer_types = cfg.get("layer_types") or []
    if cfg.get("use_sliding_window") or "sliding_attention" in layer_types:
        raise InvalidArgument(f"{where}: sliding-window attention is not supported")


def _eos_ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, list) else (int(value),)


def _moe_fields(cfg: dict) -> dict:
    num_experts = int(cfg.get("num_experts", cfg.get("num_local_experts", 0)) or 0)
    if not num_experts:
        return {}
    return dict(
        num_experts=num_experts, num_experts_per_tok=int(cfg["num_experts_per_tok"]),
        moe_intermediate_size=int(cfg["moe_intermediate_size"]),
        norm_topk_prob=bool(cfg.get("norm_topk_prob", False)),
        decoder_sparse_step=int(cfg.get("decoder_sparse_step", 1) or 1),
        mlp_only_layers=tuple(int(i) for i in cfg.get("mlp_only_layers") or ()),
        shared_expert_intermediate_size=int(cfg.get("shared_expert_intermediate_size", 0) or 0))


def text_config_of(cfg: dict, where: str = "config.json", text_part: str = "") -> tuple[str, dict, str, bool]:
    """(family, text config dict, weight prefix, tie_word_embeddings) for a checkpoint's config.

    text_part: "" for a plain decoder checkpoint (its model_type is a family); else the
    part of a composite checkpoint whose text model is served: its config is
    `<part>_config.text_config`, its tensors are under `<part>.` (the model that owns
    the checkpoint names the part through its hook)."""
    model_type = cfg.get("model_type")
    if not text_part:
        if model_type in FAMILIES:
            return model_type, cfg, "", bool(cfg.get("tie_word_embeddings", False))
        raise InvalidArgument(f"{where}: model_type {model_type!r} is not supported (supported: {FAMILIES}; a "
                              "composite checkpoint's text model is served with the part that holds it named)")
    part = cfg.get(f"{text_part}_config")
    text = part.get("text_config") if isinstance(part, dict) else None
    if not isinstance(text, dict):
        raise InvalidArgument(f"{where}: text part {text_part!r}: no {text_part}_config.text_config")
    # A composite's lm_head is tied by its part's flag, not its text_config's.
    return _nested_family(text, where), text, f"{text_part}.", bool(part.get("tie_word_embeddings", False))


def _nested_family(text: dict, where: str) -> str:
    """The family a nested text config's model_type starts with (the longest that fits),
    its sparse variant when the config has experts."""
    model_type = str(text.get("model_type", ""))
    fits = [f for f in FAMILIES if model_type.startswith(f)]
    if not fits:
        raise InvalidArgument(f"{where}: text_config.model_type {model_type!r} is of no supported family {FAMILIES}")
    family = max(fits, key=len)
    sparse = f"{family}_moe"
    return sparse if sparse in FAMILIES and _moe_fields(text) else family


def model_config_from_hf(cfg: dict, dtype: str | None = None, where: str = "config.json",
                         text_part: str = "") -> ModelConfig:
    """A ModelConfig from a Hugging Face config.json dict; `dtype` overrides the checkpoint's;
    text_part: see text_config_of."""
    family, text, prefix, tie = text_config_of(cfg, where, text_part)
    _reject_unsupported(text, where)
    theta, scaling = _rope(text, where)
    try:
        num_heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        ckpt_dtype = text.get("torch_dtype") or text.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype")
        return ModelConfig(
            family=family, vocab_size=int(text["vocab_size"]), hidden_size=hidden,
            intermediate_size=int(text["intermediate_size"]), num_layers=int(text["num_hidden_layers"]),
            num_heads=num_heads, num_kv_heads=int(text.get("num_key_value_heads") or num_heads),
            head_dim=int(text.get("head_dim") or hidden // num_heads), rope_theta=theta,
            rms_eps=float(text.get("rms_norm_eps", 1e-6)), tie_word_embeddings=tie,
            max_position=int(text.get("max_position_embeddings", 32768)),
            dtype=dtype or ckpt_dtype or "float32", rope_scaling=scaling,
            qk_norm=family != "llama", attention_bias=bool(text.get("attention_bias", False)),
            mlp_bias=bool(text.get("mlp_bias", False)), weight_prefix=prefix,
            eos_token_ids=_eos_ids(text.get("eos_token_id", cfg.get("eos_token_id"))),
            mrope_section=tuple(int(v) for v in (text.get("rope_parameters") or {}).get("mrope_section") or ()),
            **_moe_fields(text))
    except KeyError as e:
        raise InvalidArgument(f"{where}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{where}: malformed field: {e}") from None
