"""Decoded media -> what the towers take, by the checkpoint's own processor configuration
(its preprocessor_config.json, read by transformers' feature extractor and image
processor): log-mel frames for a clip, patches and their grid for an image; for a video
(an animated GIF, engine.models.qwen3_omni.video_frames) its sampled frames' patches, grid
and seconds per temporal patch, as transformers' Qwen2-VL video processor lays them out.

    features = MediaFeatures.from_checkpoint(ckpt)
    mel = features.audio(wav_bytes, "messages[0].content[1].audio")     # [mel, frames]
    pixels, grid = features.image(png_bytes, "messages[0].content[0].image")  # [N, patch_dim], (t, h, w)
    pixels, grid, seconds = features.video(gif_bytes, "messages[0].content[0].video")
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.media_decode import MediaLimits, check_bytes, decode_audio, decode_image
from engine.models.qwen3_omni.video_frames import VideoConfig, decode_gif, video_config

PROCESSOR_FILE = "preprocessor_config.json"


@contextlib.contextmanager
def _processor_refusal(field: str):
    """The image processor's ValueError (a size it cannot resize to) as the client's error:
    decoded pixels it refuses are what the client sent, not a fault of the service."""
    try:
        yield
    except ValueError as e:
        raise InvalidArgument(f"{field}: the image processor refuses it: {e}") from None


def _image_processor(path: Path):
    try:  # the fast (torchvision) processor when installed: the same arithmetic
        from transformers import Qwen2VLImageProcessor as cls
        import torchvision  # noqa: F401
    except ImportError:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as cls
    return cls.from_pretrained(str(path))


class MediaFeatures:
    def __init__(self, feature_extractor, image_processor, limits: MediaLimits,
                 video: VideoConfig | None = None) -> None:
        self.feature_extractor = feature_extractor
        self.image_processor = image_processor
        self.video_config = video or VideoConfig(int(image_processor.temporal_patch_size))
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
        images = _image_processor(path)
        return cls(extractor, images, limits, video_config(path, int(images.temporal_patch_size)))

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
        image = decode_image(data, field, self.limits)
        with _processor_refusal(field):
            return self.image_pil(image)

    def video_frames(self, frames: list) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """Sampled RGB frames (one size) -> (pixel_values [t * h * w, patch_dim], grid (t, h, w)).

        Each frame goes through the image processor (the video size bounds), which repeats
        it T times per patch; one copy of each is kept and T consecutive frames fill a
        temporal patch, the last frame repeated to a multiple of T, as the video processor's
        patchify does: rows in (frame group, merge-block order), columns (C, T, P, P)."""
        cfg, n = self.video_config, len(frames)
        size = {"shortest_edge": cfg.min_pixels, "longest_edge": cfg.max_pixels}
        out = self.image_processor(images=frames, size=size, return_tensors="pt")
        _, h, w = (int(v) for v in out["image_grid_thw"][0])
        proc_t, p = int(self.image_processor.temporal_patch_size), int(self.image_processor.patch_size)
        one = out["pixel_values"].to(torch.float32).view(n, h * w, -1, proc_t, p, p)[:, :, :, 0]  # [n, hw, C, P, P]
        t = cfg.temporal_patch_size
        if pad := -n % t:
            one = torch.cat([one, one[-1:].expand(pad, -1, -1, -1, -1)])
        groups = one.view(-1, t, h * w, one.shape[2], p, p).permute(0, 2, 3, 1, 4, 5)  # [g, hw, C, T, P, P]
        return groups.reshape(groups.shape[0] * h * w, -1).contiguous(), (groups.shape[0], h, w)

    def video(self, data: bytes, field: str) -> tuple[torch.Tensor, tuple[int, int, int], float]:
        """GIF bytes -> (pixel_values, grid, seconds per temporal patch)."""
        check_bytes(data, field, self.limits)
        frames = decode_gif(data, field, self.video_config, self.limits.max_video_frames, self.limits.max_image_pixels)
        with _processor_refusal(field):
            pixels, grid = self.video_frames(frames)
        return pixels, grid, self.video_config.seconds_per_grid

    @property
    def merge_size(self) -> int:
        return int(self.image_processor.merge_size)
