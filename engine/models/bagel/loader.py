"""Load BAGEL's backbone from a checkpoint directory in the upstream layout.

ema.safetensors holds the whole model; the backbone reads the keys under
BACKBONE_PREFIXES (its decoder under `language_model.`, the generation side's modules)
and leaves the vision side's (VISION_PREFIXES) to the vision tower's loader. Every key
is accounted for before a byte is copied: a backbone key the model lacks, a key under
no known prefix, or a parameter without its key is refused, naming the key. Tensors are
copied into parameters of the checkpoint's dtype unchanged (bf16 in the release) unless
a dtype is asked for.
"""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from core.errors import InvalidArgument
from engine.models.bagel import EMA_WEIGHTS
from engine.models.bagel.backbone import BagelLM, checkpoint_name
from engine.models.bagel.config import BagelConfig, read_bagel_config
from engine.models.loader import _load_weights, _open, _Tensors, tokenizer_path
from engine.models.meta_device import meta_device

BACKBONE_PREFIXES = ("language_model.", "vae2llm.", "llm2vae.", "time_embedder.", "latent_pos_embed.")
VISION_PREFIXES = ("vit_model.", "connector.", "vit_pos_embed.")


def build_backbone(config: BagelConfig, device: str | torch.device = "cpu") -> BagelLM:
    """An uninitialized backbone of config's dtype on `device` ("meta": shapes only, no memory)."""
    with meta_device():
        model = BagelLM(config)
    model = model.to(dtype=config.llm.torch_dtype)
    if torch.device(device).type != "meta":
        model = model.to_empty(device=device)
    return model.requires_grad_(False).eval()


def expected_keys(model: BagelLM) -> dict[str, tuple[int, ...]]:
    """ema key -> shape, for every backbone parameter."""
    return {checkpoint_name(name): tuple(p.shape) for name, p in model.named_parameters()}


def check_keys(expected: Mapping[str, tuple[int, ...]], present: Iterable[str], where: str) -> None:
    """Every expected key present; every present key the backbone's or the vision side's."""
    present = set(present)
    missing = sorted(set(expected) - present)
    if missing:
        raise InvalidArgument(f"{where} is missing tensor {missing[0]!r} ({len(missing)} missing)")
    unexpected = sorted(k for k in present - set(expected) if not k.startswith(VISION_PREFIXES))
    if unexpected:
        raise InvalidArgument(f"{where} has unexpected tensor {unexpected[0]!r} ({len(unexpected)} unexpected: "
                              f"not a parameter of the backbone nor under {VISION_PREFIXES})")


def load_backbone(checkpoint_dir: str | Path, dtype: str | None = None, device: str | torch.device = "cpu",
                  overrides: Mapping[str, Any] | None = None) -> BagelLM:
    """The backbone of a BAGEL checkpoint; dtype "float32"/"bfloat16"/"float16" (default:
    llm_config's torch_dtype); overrides: BagelDefaults fields (engine/models/bagel/config.py).

    The model carries `checkpoint_dir` and `tokenizer_path` (None without tokenizer files)."""
    path = Path(checkpoint_dir)
    config = read_bagel_config(path, dtype, overrides)
    weights = path / EMA_WEIGHTS
    if not weights.is_file():
        raise InvalidArgument(f"BAGEL checkpoint {str(path)!r} has no {EMA_WEIGHTS}")
    with _open(weights) as f:
        keys = list(f.keys())
    model = build_backbone(config, device)
    check_keys(expected_keys(model), keys, str(weights))
    with ExitStack() as stack:
        _load_weights(model, _Tensors(path, {k: weights for k in keys}, stack))
    model.checkpoint_dir = path
    model.tokenizer_path = tokenizer_path(path)
    model.offload_backend = None
    return model
