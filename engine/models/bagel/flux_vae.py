"""BAGEL's autoencoder: the FLUX autoencoder (`ae.safetensors`) served by the project's VAE.

The file holds the FLUX key layout (`encoder.down.{i}.block.{j}.conv1.weight`,
`decoder.up.{i}.upsample.conv.weight`, `*.mid.attn_1.q.weight` as 1x1 convs, ...). It is
converted here to diffusers' `AutoencoderKL` layout (the same block structure) and wrapped
in `Sd3Vae`, the project's VAE: decode unscales (z / scale_factor + shift_factor), encode
scales ((z - shift_factor) * scale_factor), taking the posterior's mean, or a sample drawn
from a given generator as upstream samples an edit's input image.

Overridable defaults (`FluxAeConfig`, upstream's hard-coded values): scale_factor 0.3611,
shift_factor 0.1159. The block shapes (channels, levels, blocks per level, 16 latent
channels, 8x downsampling for BAGEL-7B-MoT) are read from the file's tensor shapes.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import torch

from core.errors import InvalidArgument
from engine.models.sd3.checkpoint import torch_dtype
from engine.models.sd3.vae import Sd3Vae
from engine.models.meta_device import meta_device

SCALE_FACTOR, SHIFT_FACTOR = 0.3611, 0.1159


@dataclass(frozen=True)
class FluxAeConfig:
    """FLUX's AutoEncoderParams (channel counts are ch * ch_mult[level])."""

    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    z_channels: int = 16
    in_channels: int = 3
    out_ch: int = 3
    resolution: int = 256
    scale_factor: float = SCALE_FACTOR
    shift_factor: float = SHIFT_FACTOR

    def __post_init__(self) -> None:
        object.__setattr__(self, "ch_mult", tuple(int(m) for m in self.ch_mult))
        for name in ("ch", "num_res_blocks", "z_channels", "in_channels", "out_ch", "resolution"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"ae config: {name} must be >= 1, got {getattr(self, name)}")
        if not self.ch_mult or min(self.ch_mult) < 1:
            raise InvalidArgument(f"ae config: ch_mult must be a non-empty list of positive ints, got {self.ch_mult}")
        if any(self.ch * m % 32 for m in self.ch_mult):
            raise InvalidArgument(f"ae config: every ch * ch_mult must be a multiple of 32 (GroupNorm groups), "
                                  f"got ch={self.ch} ch_mult={list(self.ch_mult)}")

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)

    @classmethod
    def from_dict(cls, params: Mapping) -> "FluxAeConfig":
        """From `to_dict()` / upstream's AutoEncoderParams fields; `downsample` must agree
        with ch_mult."""
        params = dict(params)
        downsample = params.pop("downsample", None)
        try:
            config = cls(**params)
        except TypeError as e:
            raise InvalidArgument(f"ae config: {e}") from None
        if downsample is not None and int(downsample) != config.downsample:
            raise InvalidArgument(f"ae config: downsample {downsample} disagrees with ch_mult {list(config.ch_mult)} "
                                  f"({config.downsample})")
        return config

    def to_dict(self) -> dict:
        return {**asdict(self), "ch_mult": list(self.ch_mult), "downsample": self.downsample}

    def diffusers_config(self) -> dict:
        """AutoencoderKL's config for this autoencoder: FLUX.1's published diffusers config
        (no quant convs, sample_size 1024) with these channels and factors."""
        levels = len(self.ch_mult)
        return {"in_channels": self.in_channels, "out_channels": self.out_ch,
                "down_block_types": ["DownEncoderBlock2D"] * levels, "up_block_types": ["UpDecoderBlock2D"] * levels,
                "block_out_channels": [self.ch * m for m in self.ch_mult], "layers_per_block": self.num_res_blocks,
                "act_fn": "silu", "latent_channels": self.z_channels, "norm_num_groups": 32,
                "sample_size": 1024, "scaling_factor": self.scale_factor,
                "shift_factor": self.shift_factor, "use_quant_conv": False, "use_post_quant_conv": False,
                "mid_block_add_attention": True, "force_upcast": True}


def _shape(state: Mapping[str, torch.Tensor], name: str) -> tuple[int, ...]:
    if name not in state:
        raise InvalidArgument(f"ae.safetensors: tensor {name!r} is missing (not the FLUX autoencoder layout)")
    return tuple(state[name].shape)


def infer_config(state: Mapping[str, torch.Tensor], scale_factor: float = SCALE_FACTOR,
                 shift_factor: float = SHIFT_FACTOR) -> FluxAeConfig:
    """The block shapes from the tensors' shapes; the latent scaling is not in the file."""
    ch, in_channels = _shape(state, "encoder.conv_in.weight")[:2]
    levels = len({k.split(".")[2] for k in state if k.startswith("encoder.down.")})
    ch_mult = [_shape(state, f"encoder.down.{i}.block.0.conv1.weight")[0] // ch for i in range(levels)]
    blocks = len({k.split(".")[4] for k in state if k.startswith("encoder.down.0.block.")})
    return FluxAeConfig(ch=ch, ch_mult=tuple(ch_mult), num_res_blocks=blocks,
                        z_channels=_shape(state, "encoder.conv_out.weight")[0] // 2, in_channels=in_channels,
                        out_ch=_shape(state, "decoder.conv_out.weight")[0], scale_factor=scale_factor,
                        shift_factor=shift_factor)


_ATTN = {"norm": "group_norm", "q": "to_q", "k": "to_k", "v": "to_v", "proj_out": "to_out.0"}


def diffusers_key(key: str, levels: int) -> str | None:
    """A FLUX autoencoder key -> its AutoencoderKL key (None: not a key of that layout)."""
    m = re.fullmatch(r"(encoder|decoder)\.(.+)\.(weight|bias)", key)
    if m is None:
        return None
    side, module, leaf = m.groups()
    if module in ("conv_in", "conv_out"):
        new = module
    elif module == "norm_out":
        new = "conv_norm_out"
    elif mid := re.fullmatch(r"mid\.block_([12])\.(norm1|norm2|conv1|conv2|nin_shortcut)", module):
        new = f"mid_block.resnets.{int(mid[1]) - 1}.{mid[2]}"
    elif attn := re.fullmatch(r"mid\.attn_1\.(norm|q|k|v|proj_out)", module):
        new = f"mid_block.attentions.0.{_ATTN[attn[1]]}"
    elif block := re.fullmatch(r"(down|up)\.(\d+)\.block\.(\d+)\.(norm1|norm2|conv1|conv2|nin_shortcut)", module):
        kind, level, j, part = block.groups()
        level = int(level) if kind == "down" else levels - 1 - int(level)  # FLUX numbers up levels from the bottom
        new = f"{kind}_blocks.{level}.resnets.{j}.{part}"
    elif scale := re.fullmatch(r"(down|up)\.(\d+)\.(downsample|upsample)\.conv", module):
        kind, level, _ = scale.groups()
        level = int(level) if kind == "down" else levels - 1 - int(level)
        new = f"{kind}_blocks.{level}.{kind}samplers.0.conv"
    else:
        return None
    return f"{side}.{new.replace('nin_shortcut', 'conv_shortcut')}.{leaf}"


def to_diffusers_state(state: Mapping[str, torch.Tensor], config: FluxAeConfig) -> dict[str, torch.Tensor]:
    """Renamed tensors (shared, not copied); the attention's 1x1 conv weights [C, C, 1, 1]
    become linear weights [C, C]. An unknown key raises naming it."""
    out = {}
    for key, tensor in state.items():
        new = diffusers_key(key, len(config.ch_mult))
        if new is None:
            raise InvalidArgument(f"ae.safetensors: tensor {key!r} is not a key of the FLUX autoencoder layout")
        if ".attentions.0.to_" in new and new.endswith(".weight"):
            tensor = tensor.reshape(tensor.shape[0], -1)
        out[new] = tensor
    return out


def build_vae(state: Mapping[str, torch.Tensor], config: FluxAeConfig):
    """An AutoencoderKL holding `state` (FLUX layout); every tensor checked against its slot."""
    from diffusers import AutoencoderKL

    converted = to_diffusers_state(state, config)
    with meta_device():
        vae = AutoencoderKL(**config.diffusers_config())
    slots = vae.state_dict()
    origin = {diffusers_key(k, len(config.ch_mult)): k for k in state}
    for name, slot in slots.items():
        if name not in converted:
            raise InvalidArgument(f"ae.safetensors: no tensor for {name!r} of the autoencoder "
                                  f"(config {config.to_dict()})")
        if tuple(converted[name].shape) != tuple(slot.shape):
            raise InvalidArgument(f"ae.safetensors: tensor {origin[name]!r} has shape {list(converted[name].shape)}, "
                                  f"the autoencoder expects {list(slot.shape)}")
    extra = sorted(origin[k] for k in set(converted) - set(slots))
    if extra:
        raise InvalidArgument(f"ae.safetensors: tensors {extra[:4]} have no slot in the autoencoder")
    vae.load_state_dict(converted, strict=True, assign=True)
    return vae.eval().requires_grad_(False)


def load_flux_vae(path: str | Path, dtype: str = "float32", device: str = "cpu",
                  config: FluxAeConfig | None = None) -> Sd3Vae:
    """`ae.safetensors` (FLUX layout) -> the project's VAE. config: default read from the
    tensors' shapes with upstream's scale and shift factors."""
    from safetensors.torch import load_file

    if not Path(path).is_file():
        raise InvalidArgument(f"ae file {str(path)!r} does not exist")
    state = {name: t.to(torch_dtype(dtype)) for name, t in load_file(str(path)).items()}
    return Sd3Vae(build_vae(state, config or infer_config(state)).to(device), device)


def flux_shapes(config: FluxAeConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of a FLUX autoencoder with `config`, in its file's layout."""
    shapes: dict[str, tuple[int, ...]] = {}

    def conv(name, cin, cout, k):
        shapes.update({f"{name}.weight": (cout, cin, k, k), f"{name}.bias": (cout,)})

    def norm(name, c):
        shapes.update({f"{name}.weight": (c,), f"{name}.bias": (c,)})

    def resnet(name, cin, cout):
        norm(f"{name}.norm1", cin), conv(f"{name}.conv1", cin, cout, 3)
        norm(f"{name}.norm2", cout), conv(f"{name}.conv2", cout, cout, 3)
        if cin != cout:
            conv(f"{name}.nin_shortcut", cin, cout, 1)

    def middle(name, c):
        resnet(f"{name}.mid.block_1", c, c), resnet(f"{name}.mid.block_2", c, c), norm(f"{name}.mid.attn_1.norm", c)
        for part in ("q", "k", "v", "proj_out"):
            conv(f"{name}.mid.attn_1.{part}", c, c, 1)

    c, widths = config.ch, [config.ch * m for m in config.ch_mult]
    conv("encoder.conv_in", config.in_channels, c, 3)
    for i, width in enumerate(widths):
        for j in range(config.num_res_blocks):
            resnet(f"encoder.down.{i}.block.{j}", c, width)
            c = width
        if i < len(widths) - 1:
            conv(f"encoder.down.{i}.downsample.conv", c, c, 3)
    middle("encoder", c), norm("encoder.norm_out", c), conv("encoder.conv_out", c, 2 * config.z_channels, 3)
    c = widths[-1]
    conv("decoder.conv_in", config.z_channels, c, 3), middle("decoder", c)
    for i in reversed(range(len(widths))):
        for j in range(config.num_res_blocks + 1):
            resnet(f"decoder.up.{i}.block.{j}", c, widths[i])
            c = widths[i]
        if i:
            conv(f"decoder.up.{i}.upsample.conv", c, c, 3)
    norm("decoder.norm_out", c), conv("decoder.conv_out", c, config.out_ch, 3)
    return shapes


TINY_AE = FluxAeConfig(ch=32, ch_mult=(1, 1, 2, 2), num_res_blocks=1)  # 16 latent channels, 8x down, as BAGEL's


def random_ae_state(config: FluxAeConfig, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random fp32 tensors in the FLUX layout: convs scaled by fan_in ** -0.5, norm weights
    around 1, biases small."""
    state = {}
    for name, shape in flux_shapes(config).items():
        noise = torch.randn(shape, generator=generator)
        if len(shape) == 4:
            state[name] = noise * (shape[1] * shape[2] * shape[3]) ** -0.5
        elif "norm" in name and name.endswith(".weight"):
            state[name] = 1 + 0.1 * noise
        else:
            state[name] = 0.1 * noise
    return state


def tiny_ae_state(generator: torch.Generator) -> tuple[dict[str, torch.Tensor], dict]:
    """A tiny FLUX-layout autoencoder as ae.safetensors holds it, and its config
    (FluxAeConfig.to_dict(): upstream's AutoEncoderParams fields)."""
    return random_ae_state(TINY_AE, generator), TINY_AE.to_dict()
