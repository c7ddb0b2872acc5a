"""What a BAGEL checkpoint is: its llm_config.json / vit_config.json plus the values the
upstream loader hard-codes rather than reads (BagelDefaults).

The upstream release's app script builds the model with values that are in no file of
the checkpoint: the vision tower's last layer dropped and its rope off, q/k norms on,
lm_head untied, the MoT layer module, and the Bagel wrapper's sizes (ViT position grid
70 per side, latent grid 64 per side, 2x2 latent patches, the connector's activation).
They are BagelDefaults' defaults. A checkpoint of another size overrides them, in this
order (later wins): the defaults, an optional `bagel_defaults.json` in the checkpoint
directory (a JSON object of BagelDefaults fields; `starmesh make-tiny bagel` writes none,
its sizes are the defaults), and the `overrides` a caller passes (a deployment's
options). An unknown field is refused, named.

The decoder is Qwen2 with q/k RMSNorm, i.e. the engine's qwen3 family with q/k/v biases
(`attention_bias`); o_proj has no bias in Qwen2 (engine/models/bagel/backbone.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from core.errors import InvalidArgument
from engine.model_config import ModelConfig, model_config_from_hf
from engine.models.bagel import DEFAULTS_FILE, LLM_CONFIG, VIT_CONFIG
from engine.models.loader import _read_json

MOT_LAYER = "Qwen2MoTDecoderLayer"
CONNECTOR_ACTS = ("gelu_pytorch_tanh", "gelu", "silu")


@dataclass(frozen=True)
class BagelDefaults:
    vit_max_num_patch_per_side: int = 70   # vit_pos_embed grid: [70 * 70, hidden]
    max_latent_size: int = 64              # latent_pos_embed grid: [64 * 64, hidden] (patchified latents)
    latent_patch_size: int = 2             # latents patchified 2x2: one token = 2 * 2 * latent_channels values
    latent_channels: int = 16              # the FLUX autoencoder's z channels
    vae_downsample: int = 8                # pixels per latent, per side
    connector_act: str = "gelu_pytorch_tanh"
    vit_drop_last_layer: bool = True       # vit_config's num_hidden_layers - 1 layers are built
    vit_rope: bool = False
    qk_norm: bool = True
    tie_word_embeddings: bool = False
    layer_module: str = MOT_LAYER
    # the image resize rules (engine/models/bagel/preprocess.py): sides in pixels
    vae_image_max: int = 1024
    vae_image_min: int = 512
    vit_image_max: int = 980
    vit_image_min: int = 224

    def __post_init__(self) -> None:
        for name in ("vit_max_num_patch_per_side", "max_latent_size", "latent_patch_size", "latent_channels",
                     "vae_downsample", "vae_image_max", "vae_image_min", "vit_image_max", "vit_image_min"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InvalidArgument(f"BagelDefaults.{name} must be an integer > 0, got {value!r}")
        if self.connector_act not in CONNECTOR_ACTS:
            raise InvalidArgument(f"BagelDefaults.connector_act {self.connector_act!r} is not one of {CONNECTOR_ACTS}")
        for name in ("vit_drop_last_layer", "vit_rope", "qk_norm", "tie_word_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgument(f"BagelDefaults.{name} must be true or false, got {getattr(self, name)!r}")
        for side in ("vae", "vit"):
            if getattr(self, f"{side}_image_min") > getattr(self, f"{side}_image_max"):
                raise InvalidArgument(f"BagelDefaults.{side}_image_min must be <= {side}_image_max")
        if self.layer_module != MOT_LAYER:
            raise InvalidArgument(f"BagelDefaults.layer_module {self.layer_module!r}: only {MOT_LAYER!r} is supported")

    @property
    def latent_downsample(self) -> int:
        """Pixels per latent token, per side (8 x 2 = 16 upstream)."""
        return self.vae_downsample * self.latent_patch_size

    @property
    def patch_latent_dim(self) -> int:
        """Values of one latent token: p * p * latent_channels (64 upstream)."""
        return self.latent_patch_size ** 2 * self.latent_channels

    def resize_rules(self, vit_patch_size: int = 14):
        """(VAE-side, ViT-side) preprocess.ResizeRule of these sizes."""
        from engine.models.bagel.preprocess import ResizeRule

        return (ResizeRule(self.vae_image_max, self.vae_image_min, self.latent_downsample),
                ResizeRule(self.vit_image_max, self.vit_image_min, vit_patch_size))

    def vit_options(self) -> dict[str, Any]:
        """These defaults as the vision side's keywords (vit_config.VitConfig.from_siglip)."""
        return dict(num_dropped_layers=int(self.vit_drop_last_layer), connector_act=self.connector_act,
                    max_num_patch_per_side=self.vit_max_num_patch_per_side, rope=self.vit_rope)

    def replaced(self, overrides: Mapping[str, Any], where: str) -> "BagelDefaults":
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise InvalidArgument(f"{where}: unknown BAGEL default {unknown[0]!r} (known: {sorted(known)})")
        return dataclasses.replace(self, **overrides)


@dataclass(frozen=True)
class BagelConfig:
    llm: ModelConfig                      # the backbone's decoder (both experts share its sizes)
    vit: Mapping[str, Any] = field(default_factory=dict)  # vit_config.json as read (the vision side parses it)
    defaults: BagelDefaults = BagelDefaults()

    def __post_init__(self) -> None:
        if self.llm.family != "qwen3" or not self.llm.attention_bias or self.llm.num_experts:
            raise InvalidArgument("BagelConfig.llm must be a dense qwen3-family config with attention_bias "
                                  f"(Qwen2 q/k/v biases), got family {self.llm.family!r}")
        if self.llm.qk_norm != self.defaults.qk_norm:
            raise InvalidArgument("BagelConfig.llm.qk_norm must equal defaults.qk_norm")


def llm_model_config(llm: Mapping[str, Any], defaults: BagelDefaults, dtype: str | None = None,
                     where: str = LLM_CONFIG) -> ModelConfig:
    """The engine's ModelConfig of a BAGEL llm_config (a Qwen2 config dict)."""
    model_type = llm.get("model_type", "qwen2")
    if model_type != "qwen2":
        raise InvalidArgument(f"{where}: model_type {model_type!r}, expected 'qwen2'")
    layer_module = llm.get("layer_module", defaults.layer_module)
    if layer_module != MOT_LAYER:
        raise InvalidArgument(f"{where}: layer_module {layer_module!r}: only {MOT_LAYER!r} is supported")
    # Qwen2 = qwen3 math with q/k/v biases once q/k norms are on; the file's own
    # tie_word_embeddings is superseded by the loader default, as upstream does.
    as_qwen3 = {**llm, "model_type": "qwen3", "attention_bias": True,
                "tie_word_embeddings": defaults.tie_word_embeddings}
    config = model_config_from_hf(as_qwen3, dtype, where=where)
    return dataclasses.replace(config, qk_norm=defaults.qk_norm)


def read_bagel_config(checkpoint_dir: str | Path, dtype: str | None = None,
                      overrides: Mapping[str, Any] | None = None) -> BagelConfig:
    """The BagelConfig of a checkpoint directory; dtype overrides llm_config's torch_dtype."""
    path = Path(checkpoint_dir)
    if not path.is_dir():
        raise InvalidArgument(f"checkpoint directory {str(path)!r} does not exist")
    for name in (LLM_CONFIG, VIT_CONFIG):
        if not (path / name).is_file():
            raise InvalidArgument(f"BAGEL checkpoint {str(path)!r} has no {name}")
    defaults = BagelDefaults()
    if (path / DEFAULTS_FILE).is_file():
        defaults = defaults.replaced(_read_json(path / DEFAULTS_FILE), str(path / DEFAULTS_FILE))
    if overrides:
        defaults = defaults.replaced(overrides, "BAGEL overrides")
    llm = llm_model_config(_read_json(path / LLM_CONFIG), defaults, dtype, where=str(path / LLM_CONFIG))
    return BagelConfig(llm=llm, vit=_read_json(path / VIT_CONFIG), defaults=defaults)
