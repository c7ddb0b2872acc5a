"""Whether a directory is a BAGEL checkpoint (the upstream release's layout)."""
from __future__ import annotations

from pathlib import Path

from engine.models.bagel import AE_WEIGHTS, EMA_WEIGHTS, LLM_CONFIG, VIT_CONFIG


def is_bagel_checkpoint(checkpoint: str | Path) -> bool:
    path = Path(checkpoint)
    return all((path / name).is_file() for name in (LLM_CONFIG, VIT_CONFIG, EMA_WEIGHTS, AE_WEIGHTS))
