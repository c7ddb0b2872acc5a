"""Code2wav as a component: node `code2wav` turns one window of codec codes into audio.

open() validates the window and queues it on the stateless engine; each step() decodes
one batch of windows of equal length (chunks of different requests batched together)
and answers each with NodeOutput {"audio": float32 [S]} then NodeDone.

A batch holds at most `max_batch_frames` frames (its windows' T summed; one window
always fits) and at most `max_batch_size` windows (MAX_BATCH_WINDOWS by default: the
4-frame first windows of a burst of 16 streams, 64 frames, decode in one forward, 24 ms
against 2 x 13 ms for two batches of 8, and the burst's last first window no longer
waits for a second batch). On CPU a window of 50 frames costs as much alone as in a
batch of 8 (the activations outgrow the caches), so a big batch only holds the engine
longer while an urgent first window waits behind it; short first windows still batch
(4 frames: half the cost each in a batch of 8).

A window is `codes` [T, Q] (frames first: streamed parts arrive concatenated along
dim 0) whose first `chunk.num_context` frames are left context: decoded, but their
audio dropped. `chunk.num_pad` is not used: the model is causal, so padding frames
would not change the real frames' audio and are simply not decoded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from engine.slack_policy import SlackPolicy
from engine.stateless_engine import StatelessConfig
from runtime.stateless_component import StatelessComponent
from runtime.items import OpenNode
from core.errors import InvalidArgument

if TYPE_CHECKING:
    from engine.models.qwen3_omni.code2wav import Code2Wav

NODE = "code2wav"
MAX_BATCH_FRAMES = 64  # a batch's frames (bench: python -m bench.codec_batch)
MAX_BATCH_WINDOWS = MAX_BATCH_FRAMES // 4  # a batch's windows: every 4-frame first window the frames bound lets in


@dataclass(frozen=True)
class Window:
    """One queued decode: codes [T, Q] int64 and how many leading frames are context."""

    codes: torch.Tensor
    num_context: int


class Code2WavComponent(StatelessComponent):
    """Node `code2wav`: {"codes": int [T, Q]} -> {"audio": float32 [S]}; batch key T."""

    name = "codec"
    nodes = (NODE,)

    def __init__(self, model: "Code2Wav", config: StatelessConfig = StatelessConfig()) -> None:
        super().__init__(config)
        self.model = model
        self.device = next(model.parameters()).device

    @classmethod
    def from_checkpoint(cls, checkpoint: str, dtype: str | None = None, device: str = "cpu",
                        max_batch_size: int | None = None, max_queued: int = 1024, schedule: str = "deadline",
                        max_batch_frames: int | None = None) -> "Code2WavComponent":
        """The code2wav of a Qwen3-Omni checkpoint; dtype defaults to the checkpoint's;
        max_batch_frames: None is MAX_BATCH_FRAMES; max_batch_size: None is MAX_BATCH_WINDOWS."""
        from engine.models.qwen3_omni.code2wav import Code2Wav

        frames = MAX_BATCH_FRAMES if max_batch_frames is None else max_batch_frames
        if not isinstance(frames, int) or isinstance(frames, bool) or frames < 1:
            raise InvalidArgument(f"max_batch_frames must be an integer >= 1, got {frames!r}")
        model = Code2Wav.from_checkpoint(checkpoint, dtype=dtype, device=device)
        windows = MAX_BATCH_WINDOWS if max_batch_size is None else max_batch_size
        return cls(model, StatelessConfig(max_batch_size=windows, max_queued=max_queued,
                                          policy=SlackPolicy(schedule), max_batch_weight=frames))

    def prepare(self, item: OpenNode, inputs: dict[str, torch.Tensor]) -> tuple[int, Window]:
        """(window length T, the window); InvalidArgument naming the field for a bad window."""
        codes = inputs.get("codes")
        if codes is None:
            raise InvalidArgument(f"open.inputs: {NODE} needs 'codes' (got {sorted(inputs)})")
        config = self.model.config
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise InvalidArgument(f"open.inputs[codes]: dtype {codes.dtype} is not an integer type")
        if codes.dim() != 2:
            raise InvalidArgument(f"open.inputs[codes]: expected [T, {config.num_quantizers}] (frames, code "
                                  f"groups), got shape {tuple(codes.shape)}")
        if codes.shape[1] != config.num_quantizers:
            raise InvalidArgument(f"open.inputs[codes]: {codes.shape[1]} code groups (dim 1), the model has "
                                  f"{config.num_quantizers}")
        num_context = item.chunk.num_context if item.chunk is not None else 0
        if codes.shape[0] == 0 or not 0 <= num_context < codes.shape[0]:
            raise InvalidArgument(f"open.chunk.num_context: {num_context} context frames leave no new frame in a "
                                  f"window of {codes.shape[0]} frames (open.inputs[codes] dim 0)")
        low, high = int(codes.min()), int(codes.max())
        if low < 0 or high >= config.codebook_size:
            raise InvalidArgument(f"open.inputs[codes]: values must be in [0, {config.codebook_size}), "
                                  f"got [{low}, {high}]")
        return codes.shape[0], Window(codes.to(torch.int64), num_context)

    def weight(self, key: int, payload: Window) -> int:
        return key  # the window's frames

    def run(self, key: int, payloads: list[Window]) -> list[dict[str, torch.Tensor]]:
        """One forward over the batch: codes [B, T, Q] -> per window {"audio": float32 [S]}."""
        codes = torch.stack([w.codes for w in payloads]).to(self.device)  # [B, T, Q]
        wavs = self.model.decode_windows(codes, [w.num_context for w in payloads])
        return [{"audio": w.to(device="cpu", dtype=torch.float32, copy=True)} for w in wavs]


def codec_hook(checkpoint: str, dtype: str | None = None, device: str = "cpu",
               max_batch_size: int | None = None, max_queued: int = 1024, schedule: str = "deadline",
               max_batch_frames: int | None = None, **_other_codecs_options) -> Code2WavComponent | None:
    """The codec service's hook (services/codec/factory.py): code2wav when the checkpoint's
    config.json has a code2wav_config, else None."""
    from services.qwen3_omni.thinker_hook import read_config

    if "code2wav_config" not in (read_config(checkpoint) or {}):
        return None
    return Code2WavComponent.from_checkpoint(checkpoint, dtype=dtype, device=device, max_batch_size=max_batch_size,
                                             max_queued=max_queued, schedule=schedule,
                                             max_batch_frames=max_batch_frames)
