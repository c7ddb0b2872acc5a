"""Load Qwen3-Omni's audio tower (`thinker.audio_tower.`) or vision tower (`thinker.visual.`)
from a checkpoint, each on its own: an encoder service loads only the tower it serves."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import torch
from torch import nn

from core.errors import InvalidArgument
from engine.model_config import DTYPES
from engine.models.loader import _checkpoint_dir, _read_json, _Tensors, weight_files
from engine.models.qwen3_omni.audio_encoder import AudioEncoder
from engine.models.qwen3_omni.encoder_config import (AUDIO_PREFIX, VISION_PREFIX, audio_config_from_hf,
                                                     vision_config_from_hf)
from engine.models.qwen3_omni.vision_encoder import VisionEncoder
from engine.models.meta_device import meta_device


def _materialize(module: nn.Module, dtype: str, device) -> nn.Module:
    if dtype not in DTYPES:
        raise InvalidArgument(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
    return module.to(dtype=DTYPES[dtype]).to_empty(device=device).requires_grad_(False).eval()


def _load_prefixed(module: nn.Module, path: Path, prefix: str) -> None:
    with ExitStack() as stack:
        tensors = _Tensors(path, weight_files(path), stack)
        for name, param in module.named_parameters():
            tensor = tensors.get(prefix + name)
            if tuple(tensor.shape) != tuple(param.shape):
                raise InvalidArgument(f"tensor {prefix + name!r} has shape {tuple(tensor.shape)}, "
                                      f"expected {tuple(param.shape)}")
            param.data.copy_(tensor)


def _load_tower(checkpoint_dir, build, read_config, prefix: str, dtype: str, device) -> nn.Module:
    path = _checkpoint_dir(checkpoint_dir)
    config = read_config(_read_json(path / "config.json"), str(path / "config.json"))
    with meta_device():
        model = build(config)
    model = _materialize(model, dtype, device)
    _load_prefixed(model, path, prefix)
    return model


def load_audio_encoder(checkpoint_dir: str | Path, dtype: str = "float32",
                       device: str | torch.device = "cpu") -> AudioEncoder:
    return _load_tower(checkpoint_dir, AudioEncoder, audio_config_from_hf, AUDIO_PREFIX, dtype, device)


def load_vision_encoder(checkpoint_dir: str | Path, dtype: str = "float32",
                        device: str | torch.device = "cpu") -> VisionEncoder:
    return _load_tower(checkpoint_dir, VisionEncoder, vision_config_from_hf, VISION_PREFIX, dtype, device)
