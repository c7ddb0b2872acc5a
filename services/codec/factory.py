"""`starmesh serve codec --checkpoint DIR`: the codec a checkpoint holds. A SNAC directory
(or a checkpoint with one under snac/, an Orpheus checkpoint) serves node `snac`; a
Qwen3-Omni checkpoint serves `code2wav`; a directory with both serves both."""
from __future__ import annotations

import json
from pathlib import Path

from core.errors import InvalidArgument

SNAC_SUBDIR = "snac"


def snac_dir(checkpoint: str) -> str | None:
    from engine.models.snac.config import is_snac_dir

    for candidate in (Path(checkpoint), Path(checkpoint) / SNAC_SUBDIR):
        if is_snac_dir(candidate):
            return str(candidate)
    return None


def has_code2wav(checkpoint: str) -> bool:
    try:
        cfg = json.loads((Path(checkpoint) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and "code2wav_config" in cfg


def codec_from_checkpoint(checkpoint: str, dtype: str | None = None, device: str = "cpu", max_batch_size: int = 8,
                          max_queued: int = 1024, schedule: str = "deadline", max_batch_frames: int | None = None):
    """max_batch_frames: code2wav's (None: its default); SNAC's windows are all one size."""
    from services.codec.component import CodecComponent

    snac, code2wav = snac_dir(checkpoint), has_code2wav(checkpoint)
    if snac is None:
        if not code2wav:
            raise InvalidArgument(f"checkpoint {checkpoint}: neither a SNAC codec (config.json with vq_strides, "
                                  "here or under snac/) nor a Qwen3-Omni code2wav")
        return CodecComponent.from_checkpoint(checkpoint, dtype=dtype, device=device,
                                              max_batch_size=max_batch_size, max_queued=max_queued,
                                              schedule=schedule, max_batch_frames=max_batch_frames)
    from services.orpheus.codec import SnacComponent

    component = SnacComponent.from_checkpoint(snac, device=device, max_batch_size=max(16, max_batch_size),
                                              max_queued=max(4096, max_queued), schedule=schedule)
    if not code2wav:
        return component
    from runtime.colocated import Colocated

    codec = CodecComponent.from_checkpoint(checkpoint, dtype=dtype, device=device, max_batch_size=max_batch_size,
                                           max_queued=max_queued, schedule=schedule, max_batch_frames=max_batch_frames)
    return Colocated([codec, component], name="codec")
