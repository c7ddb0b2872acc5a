"""Tiny random checkpoint builders by kind, for tests, demos and `starmesh up`'s built-in models.

Each builder is imported only when used (transformers/diffusers are heavy imports)."""
from __future__ import annotations

import importlib
from pathlib import Path

from core.errors import InvalidArgument

# kind -> "module:function(directory, seed=...)"
BUILDERS = {
    "qwen3-omni": "engine.checkpoints.tiny_omni:make_tiny_omni",
    "qwen3": "engine.checkpoints.tiny_text:make_tiny_text",
    "qwen3-moe": "engine.checkpoints.tiny_text:make_tiny_text",
    "llama": "engine.checkpoints.tiny_text:make_tiny_text",
    "sd3": "engine.checkpoints.tiny_sd3:make_tiny_sd3",
    "orpheus": "engine.checkpoints.tiny_orpheus:make_tiny_orpheus",
    "vjepa2-ac": "engine.checkpoints.tiny_vjepa2:make_tiny_vjepa2",
}


def build_tiny(kind: str, directory: str | Path, seed: int = 0) -> Path:
    """Writes a tiny random checkpoint of `kind` into `directory`; returns its path."""
    if kind not in BUILDERS:
        raise InvalidArgument(f"kind {kind!r} is not a tiny checkpoint kind (have {sorted(BUILDERS)})")
    module, _, func = BUILDERS[kind].partition(":")
    build = getattr(importlib.import_module(module), func)
    kwargs = {"kind": kind} if func == "make_tiny_text" else {}
    return Path(build(directory, seed=seed, **kwargs))
