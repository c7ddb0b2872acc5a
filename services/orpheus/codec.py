"""SNAC as a component: node `snac` turns one sliding window of Orpheus audio codes into
the audio the reference streaming rule emits for it.

open() takes `codes` int [n] (a window of accepted codes; streamed parts arrive
concatenated) with its ChunkInfo. A regular window (28 codes: the first one, or 7 new
after 21 of context) whose codes are all in 0..4095 is queued; each step() decodes one
batch of them (windows of many requests together) and answers each with NodeOutput
{"audio": float32 [2048]}, samples 2048..4096 of its decode, then NodeDone. The
end-of-stream residual window and a window with an out-of-range code emit no audio (a
NodeOutput without tensors, then NodeDone), as the reference emits nothing for them: the
conductor applies chunk runs' outputs in chunk order, so every run answers with one.

Noise: each window's SNAC noise comes from its own generator, seeded from the request's
`seed` param (or its request id) and the window's end position in the code stream.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from core.errors import InvalidArgument
from engine.models.orpheus.windows import (EMIT_END, EMIT_START, WINDOW_CODES, is_regular, is_valid, snac_levels,
                                           window_noise_seed)
from engine.slack_policy import SlackPolicy
from engine.stateless_engine import StatelessConfig
from runtime.items import OpenNode
from runtime.stateless_component import StatelessComponent

if TYPE_CHECKING:
    from engine.models.snac.model import SnacDecoder

NODE = "snac"
SKIP = "skip"  # the batch key of windows that emit nothing


@dataclass(frozen=True)
class SnacWindow:
    codes: torch.Tensor   # [28] int64
    noise_seed: int | None


def request_seed(item: OpenNode) -> int:
    seed = item.params.get("seed")
    return int(seed) if seed is not None else zlib.crc32(item.request_id.encode())


class SnacComponent(StatelessComponent):
    """Node `snac`: {"codes": int [28]} -> {"audio": float32 [2048]} or nothing."""

    name = "snac"
    nodes = (NODE,)

    def __init__(self, model: "SnacDecoder", config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model = model
        self.device = next(model.parameters()).device

    @classmethod
    def from_checkpoint(cls, checkpoint: str, device: str = "cpu", max_batch_size: int = 16,
                        max_queued: int = 4096, schedule: str = "deadline") -> "SnacComponent":
        from engine.models.snac.model import SnacDecoder

        return cls(SnacDecoder.from_checkpoint(checkpoint, device=device),
                   StatelessConfig(max_batch_size=max_batch_size, max_queued=max_queued,
                                   policy=SlackPolicy(schedule)))

    def prepare(self, item: OpenNode, inputs: dict[str, torch.Tensor]):
        codes = inputs.get("codes")
        if codes is None:
            raise InvalidArgument(f"open.inputs: {NODE} needs 'codes' (got {sorted(inputs)})")
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise InvalidArgument(f"open.inputs[codes]: dtype {codes.dtype} is not an integer type")
        codes = codes.reshape(-1).to(torch.int64)
        chunk = item.chunk
        num_context, start = (chunk.num_context, chunk.start) if chunk is not None else (0, 0)
        if not is_regular(codes.numel(), num_context, start) or not is_valid(codes):
            return SKIP, None
        seed = window_noise_seed(request_seed(item), start + WINDOW_CODES) if self.model.config.noise else None
        return WINDOW_CODES, SnacWindow(codes.clone(), seed)

    def run(self, key, payloads: list[SnacWindow | None]) -> list[dict[str, torch.Tensor]]:
        if key == SKIP:
            return [{} for _ in payloads]
        windows = torch.stack([w.codes for w in payloads]).to(self.device)  # [B, 28]
        seeds = None if payloads[0].noise_seed is None else [w.noise_seed for w in payloads]
        audio = self.model.decode(snac_levels(windows), seeds)  # [B, 8192]
        return [{"audio": a[EMIT_START:EMIT_END].to(device="cpu", dtype=torch.float32, copy=True)} for a in audio]


SNAC_SUBDIR = "snac"  # where an Orpheus checkpoint keeps its SNAC decoder


def snac_dir(checkpoint: str) -> str | None:
    """The SNAC directory of `checkpoint`: itself, or its snac/ subdirectory; None if neither."""
    from pathlib import Path

    from engine.models.snac.config import is_snac_dir

    for candidate in (Path(checkpoint), Path(checkpoint) / SNAC_SUBDIR):
        if is_snac_dir(candidate):
            return str(candidate)
    return None


def codec_hook(checkpoint: str, device: str = "cpu", max_batch_size: int = 8, max_queued: int = 1024,
               schedule: str = "deadline", **_other_codecs_options) -> SnacComponent | None:
    """The codec service's hook (services/codec/factory.py): SNAC when the checkpoint is a
    SNAC directory or holds one under snac/, else None. SNAC's windows are small and all
    one size, so it batches and queues more than the service's defaults."""
    directory = snac_dir(checkpoint)
    if directory is None:
        return None
    return SnacComponent.from_checkpoint(directory, device=device, max_batch_size=max(16, max_batch_size),
                                         max_queued=max(4096, max_queued), schedule=schedule)
