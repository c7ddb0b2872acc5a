"""Qwen3-Omni's towers for the shared encoder service (services/encoder): the audio tower
(`thinker.audio_tower.`: WAV -> log-mel -> rows) and the vision tower (`thinker.visual.`:
PNG/JPEG or an animated GIF's sampled frames -> patches -> rows and deepstack rows),
each with the checkpoint's own processor configuration.

    audio  -> EncodedPart(rows [tokens, hidden])
    image  -> EncodedPart(rows [tokens, hidden], deepstack [layers, tokens, hidden], grid (t, h, w))
    video  -> the same, plus seconds per temporal patch (the video's rope time step)

Images and videos batch together in one vision forward (attention stays inside one frame
of one item), so each part's rows are its solo rows.
"""
from __future__ import annotations

from typing import Any

import torch

from services.encoder.media_list import EncodedPart
from services.encoder.towers import EncoderHook
from services.qwen3_omni.thinker_hook import read_config


class AudioTower:
    kinds = ("audio",)

    def __init__(self, model, features) -> None:
        self.model, self.features = model, features

    def prepare(self, kind: str, data: bytes, field: str) -> torch.Tensor:
        return self.features.audio(data, field)  # [mel, frames]

    def run(self, payloads: list[torch.Tensor]) -> list[EncodedPart]:
        return [EncodedPart(r.to(device="cpu", dtype=torch.float32, copy=True)) for r in self.model(payloads)]


class VisionTower:
    kinds = ("image", "video")

    def __init__(self, model, features) -> None:
        self.model, self.features = model, features

    def prepare(self, kind: str, data: bytes, field: str) -> tuple[torch.Tensor, tuple, float]:
        """-> (pixels [N, patch_dim], grid (t, h, w), seconds per temporal patch; 0 for an image)."""
        if kind == "video":
            return self.features.video(data, field)
        return (*self.features.image(data, field), 0.0)

    def run(self, payloads: list[tuple]) -> list[EncodedPart]:
        out = self.model(torch.cat([pixels for pixels, _, _ in payloads]), [grid for _, grid, _ in payloads])
        parts = []
        for embeds, deepstack, (_, grid, seconds) in zip(out.embeds, out.deepstack, payloads):
            stacked = torch.stack(deepstack) if deepstack else embeds.new_zeros((0, *embeds.shape))
            parts.append(EncodedPart(embeds.to(device="cpu", dtype=torch.float32, copy=True),
                                     stacked.to(device="cpu", dtype=torch.float32, copy=True), grid, seconds))
        return parts


def _audio(checkpoint: str):
    def load(dtype: str, device: str) -> AudioTower:
        from engine.models.qwen3_omni.encoder_loader import load_audio_encoder
        from engine.models.qwen3_omni.media_features import MediaFeatures

        return AudioTower(load_audio_encoder(checkpoint, dtype, device), MediaFeatures.from_checkpoint(checkpoint))
    return load


def _vision(checkpoint: str):
    def load(dtype: str, device: str) -> VisionTower:
        from engine.models.qwen3_omni.encoder_loader import load_vision_encoder
        from engine.models.qwen3_omni.media_features import MediaFeatures

        return VisionTower(load_vision_encoder(checkpoint, dtype, device), MediaFeatures.from_checkpoint(checkpoint))
    return load


def encoder_hook(checkpoint: str, **_: Any) -> EncoderHook | None:
    """The towers of a Qwen3-Omni checkpoint (those its thinker config has); None for any
    other checkpoint."""
    thinker = (read_config(checkpoint) or {}).get("thinker_config")
    if not isinstance(thinker, dict):
        return None
    towers = {}
    if isinstance(thinker.get("audio_config"), dict):
        towers["audio"] = _audio(checkpoint)
    if isinstance(thinker.get("vision_config"), dict):
        towers["vision"] = _vision(checkpoint)
    return EncoderHook(towers) if towers else None
