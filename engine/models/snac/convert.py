"""Released SNAC weights (pytorch_model.bin) -> model.safetensors, once, with torch's
weights-only loader (no arbitrary pickle code runs); starmesh reads only safetensors."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from core.errors import InvalidArgument
from engine.models.snac.config import CONFIG_FILE, WEIGHTS_FILE, SnacConfig

PICKLE_FILE = "pytorch_model.bin"


def convert_snac(src: str | Path, dst: str | Path) -> Path:
    """SRC (config.json + pytorch_model.bin) -> DST (config.json + model.safetensors)."""
    src, dst = Path(src), Path(dst)
    SnacConfig.from_dir(src)  # a bad config fails before anything is written
    if not (src / PICKLE_FILE).is_file():
        raise InvalidArgument(f"src {src}: no {PICKLE_FILE}")
    try:
        state = torch.load(src / PICKLE_FILE, map_location="cpu", weights_only=True)
    except Exception as e:  # the weights-only unpickler refuses anything but tensors
        raise InvalidArgument(f"src {src / PICKLE_FILE}: not a weights-only state dict ({e})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InvalidArgument(f"src {src / PICKLE_FILE}: expected a dict of tensors")
    dst.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(dst / WEIGHTS_FILE))
    shutil.copyfile(src / CONFIG_FILE, dst / CONFIG_FILE)
    return dst
