"""Decoded media -> what the towers take, by the checkpoint's own processor configuration
(its preprocessor_config.json, read by transformers' feature extractor and image
processor): log-mel frames for a clip, patches and their grid for an image.

    features = MediaFeatures.from_checkpoint(ckpt)
    mel = features.audio(wav_bytes, "messages[0].content[1].audio")     # [mel, frames]
    pixels, grid = features.image(png_bytes, "messages[0].content[0].image")  # [N, patch_dim], (t, h, w)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.media_decode import MediaLimits, decode_audio, decode_image

PROCESSOR_FILE = "preprocessor_config.json"


def _image_processor(path: Path):
    try:  # the fast (torchvision) processor when installed: the same arithmetic
        from transformers import Qwen2VLImageProcessor as cls
        import torchvision  # noqa: F401
    except ImportError:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as cls
    return cls.from_pretrained(str(path))


class MediaFeatures:
    def __init__(self, feature_extractor, image_processor, limits: MediaLimits) -> None:
        self.feature_extractor = feature_extractor
        self.image_processor = image_processor
        self.sampling_rate = int(feature_extractor.sampling_rate)
        self.limits = limits

    @classmethod
    def from_checkpoint(cls, checkpoint_dir: str | Path, limits: MediaLimits | None = None) -> "MediaFeatures":
        """The checkpoint's processors; `limits` defaults to the feature extractor's own
        longest clip (its chunk_length)."""
        from transformers import WhisperFeatureExtractor

        path = Path(checkpoint_dir)
        if not (path / PROCESSOR_FILE).is_file():
            raise InvalidArgument(f"checkpoint {str(path)!r} has no {PROCESSOR_FILE} (no audio or image input)")
        extractor = WhisperFeatureExtractor.from_pretrained(str(path))
        limits = limits or MediaLimits(max_audio_seconds=float(extractor.chunk_length))
        return cls(extractor, _image_processor(path), limits)

    def audio_samples(self, samples: np.ndarray, field: str) -> torch.Tensor:
        """Mono float32 samples at the tower's rate -> log-mel frames [mel, frames > 0]."""
        if len(samples) < self.feature_extractor.hop_length:
            raise InvalidArgument(f"{field} is shorter than one {self.feature_extractor.hop_length}-sample frame")
        out = self.feature_extractor([samples], sampling_rate=self.sampling_rate, padding=True, truncation=False,
                                     return_attention_mask=True, return_tensors="pt")
        frames = int(out["attention_mask"][0].sum())
        return out["input_features"][0, :, :frames].to(torch.float32)

    def audio(self, data: bytes, field: str) -> torch.Tensor:
        """WAV bytes -> log-mel frames [mel, frames]."""
        return self.audio_samples(decode_audio(data, field, self.sampling_rate, self.limits), field)

    def image_pil(self, image) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """An RGB PIL image -> (pixel_values [N, patch_dim] fp32 in merge-block order, grid (t, h, w))."""
        out = self.image_processor(images=[image], return_tensors="pt")
        t, h, w = (int(v) for v in out["image_grid_thw"][0])
        return out["pixel_values"].to(torch.float32), (t, h, w)

    def image(self, data: bytes, field: str) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """PNG/JPEG bytes -> (pixel_values, grid)."""
        return self.image_pil(decode_image(data, field, self.limits))

    @property
    def merge_size(self) -> int:
        return int(self.image_processor.merge_size)
