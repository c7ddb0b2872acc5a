"""The shape of BAGEL's ViT side: the SigLIP tower as served, its connector and position table.

Read from a SiglipVisionConfig-style dict (the checkpoint's `vit_config.json`) plus what
upstream's serving script sets in code rather than reads (each an overridable keyword of
`VitConfig.from_siglip`, defaults as upstream serves BAGEL-7B-MoT):

    num_dropped_layers=1       the tower runs the file's num_hidden_layers minus this many
    max_num_patch_per_side=70  the patch grid the flattened position ids live on (both the
                               tower's learned table and `vit_pos_embed`)
    connector_act="gelu_pytorch_tanh"  the connector MLP's activation
    rope=False                 only the learned-position form is implemented; True is refused
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.errors import InvalidArgument

ACTIVATIONS = ("gelu_pytorch_tanh", "gelu")  # tanh-approximated and exact GELU


@dataclass(frozen=True)
class VitConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int              # layers run (the file's count minus the dropped ones)
    num_heads: int
    patch_size: int
    image_size: int              # the tower's learned table covers (image_size / patch_size) ** 2 patches
    llm_hidden_size: int         # the connector's output width
    num_channels: int = 3
    layer_norm_eps: float = 1e-6
    hidden_act: str = "gelu_pytorch_tanh"
    connector_act: str = "gelu_pytorch_tanh"
    max_num_patch_per_side: int = 70

    def __post_init__(self) -> None:
        for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads", "patch_size", "image_size",
                     "llm_hidden_size", "num_channels", "max_num_patch_per_side"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise InvalidArgument(f"vit config: {name} must be an integer >= 1, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_heads:
            raise InvalidArgument(f"vit config: hidden_size {self.hidden_size} is not a multiple of "
                                  f"num_attention_heads {self.num_heads}")
        for name in ("hidden_act", "connector_act"):
            if getattr(self, name) not in ACTIVATIONS:
                raise InvalidArgument(f"vit config: {name} {getattr(self, name)!r} is not one of {ACTIVATIONS}")
        if self.max_num_patch_per_side > self.patches_per_side:
            raise InvalidArgument(f"vit config: max_num_patch_per_side {self.max_num_patch_per_side} exceeds the "
                                  f"tower's position table ({self.image_size} / {self.patch_size} = "
                                  f"{self.patches_per_side} patches per side)")
        if self.llm_hidden_size % 4:
            raise InvalidArgument(f"vit config: llm_hidden_size {self.llm_hidden_size} must be a multiple of 4 "
                                  "(the sin-cos table's four quarters)")

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size

    @property
    def patch_dim(self) -> int:
        """Values per flattened patch: patch_size * patch_size * num_channels."""
        return self.patch_size * self.patch_size * self.num_channels

    @classmethod
    def from_siglip(cls, vit_config: Mapping[str, Any], llm_hidden_size: int, *, num_dropped_layers: int = 1,
                    max_num_patch_per_side: int = 70, connector_act: str = "gelu_pytorch_tanh",
                    rope: bool = False) -> "VitConfig":
        if rope:
            raise InvalidArgument("vit config: rope=True is not implemented (BAGEL serves its ViT with rope=False)")
        try:
            layers = int(vit_config["num_hidden_layers"]) - int(num_dropped_layers)
            return cls(hidden_size=int(vit_config["hidden_size"]),
                       intermediate_size=int(vit_config["intermediate_size"]),
                       num_layers=layers, num_heads=int(vit_config["num_attention_heads"]),
                       patch_size=int(vit_config["patch_size"]), image_size=int(vit_config["image_size"]),
                       llm_hidden_size=int(llm_hidden_size), num_channels=int(vit_config.get("num_channels", 3)),
                       layer_norm_eps=float(vit_config.get("layer_norm_eps", 1e-6)),
                       hidden_act=str(vit_config.get("hidden_act", "gelu_pytorch_tanh")),
                       connector_act=connector_act, max_num_patch_per_side=int(max_num_patch_per_side))
        except KeyError as e:
            raise InvalidArgument(f"vit config: missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"vit config: {e}") from None
