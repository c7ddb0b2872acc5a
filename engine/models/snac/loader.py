"""A SNAC checkpoint directory -> SnacDecoder: config.json plus model.safetensors (read
memory-mapped, never pickle). Weight-normed convolutions are stored as (g, v) pairs,
either torch's parametrization names (`.parametrizations.weight.original0/1`) or the
older `.weight_g`/`.weight_v`; they are folded into plain weights with the op the
parametrization itself runs (torch._weight_norm, dim 0). Encoder tensors are ignored."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from core.errors import InvalidArgument
from engine.models.snac.config import WEIGHTS_FILE, SnacConfig
from engine.models.snac.model import SnacDecoder

PAIRS = ((".parametrizations.weight.original0", ".parametrizations.weight.original1"), (".weight_g", ".weight_v"))


def fold_weight_norm(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every (g, v) pair -> `<module>.weight`; other tensors as they are."""
    out, used = {}, set()
    for name in tensors:
        for g_suffix, v_suffix in PAIRS:
            if name.endswith(g_suffix):
                base = name[: -len(g_suffix)]
                v = tensors.get(base + v_suffix)
                if v is None:
                    raise InvalidArgument(f"snac weights: {name} has no {base + v_suffix}")
                out[base + ".weight"] = torch._weight_norm(v, tensors[name], 0)
                used |= {name, base + v_suffix}
    out.update({k: v for k, v in tensors.items() if k not in used and not k.endswith(PAIRS[0][1])
                and not k.endswith(PAIRS[1][1])})
    return out


def decoder_state(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The decoder's and the code projections' tensors (encoder and in_proj dropped)."""
    folded = fold_weight_norm(tensors)
    return {k: v for k, v in folded.items()
            if k.startswith("decoder.") or (k.startswith("quantizer.") and ".in_proj." not in k)}


def load_snac(directory: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> SnacDecoder:
    config = SnacConfig.from_dir(directory)
    path = Path(directory) / WEIGHTS_FILE
    if not path.is_file():
        raise InvalidArgument(f"snac checkpoint {directory}: no {WEIGHTS_FILE} (convert a pytorch_model.bin "
                              "once with `starmesh convert snac SRC DST`)")
    model = SnacDecoder(config)
    state = decoder_state(load_file(str(path)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise InvalidArgument(f"snac checkpoint {directory}: missing {sorted(missing)[:4]}, unexpected "
                              f"{sorted(unexpected)[:4]} (does config.json match the weights?)")
    return model.to(device=device, dtype=dtype).eval()
