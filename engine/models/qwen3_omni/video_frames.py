"""A client's video (an animated GIF's bytes) -> the RGB frames the vision tower sees, sampled
as transformers' Qwen2-VL video processor samples them (`sample_frames` with `fps`).

GIF is the container because Pillow (already a dependency, pinned) decodes it with no
codec library: no FFmpeg, no torchvision. Each frame's `duration` (ms) gives the clip's
frame rate; a frame without one counts 100 ms, as browsers show it.

Sampling (VideoConfig, from the checkpoint's video_preprocessor_config.json):
    n = total / video_fps * fps, clamped to [min_frames, min(max_frames, total) // T * T],
    floored to a multiple of T (temporal_patch_size); indices = arange(0, total, total / n).
Each temporal patch of T sampled frames then spans T / fps seconds (`seconds_per_grid`),
the time step of the video's rope ids.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from core.errors import InvalidArgument

VIDEO_FILE = "video_preprocessor_config.json"
DEFAULT_FRAME_MS = 100
# Qwen3-Omni's processor defaults (its videos_kwargs size; qwen-omni-utils' 2 fps, 4..768 frames)
DEFAULTS = {"fps": 2.0, "min_frames": 4, "max_frames": 768, "do_sample_frames": True,
            "size": {"shortest_edge": 128 * 32 * 32, "longest_edge": 768 * 32 * 32}}


@dataclass(frozen=True)
class VideoConfig:
    temporal_patch_size: int
    fps: float = 2.0               # frames sampled per second of video
    min_frames: int = 4
    max_frames: int = 768          # sampled frames at most
    do_sample_frames: bool = True  # False: every frame of the file (at most max_frames)
    min_pixels: int = 128 * 32 * 32  # per frame after resizing (the processor's size.shortest_edge)
    max_pixels: int = 768 * 32 * 32  # size.longest_edge

    def __post_init__(self) -> None:
        for name in ("temporal_patch_size", "fps", "min_frames", "max_frames", "min_pixels", "max_pixels"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"VideoConfig.{name} must be > 0, got {getattr(self, name)}")

    @property
    def seconds_per_grid(self) -> float:
        return self.temporal_patch_size / self.fps


def video_config(checkpoint_dir: str | Path, temporal_patch_size: int) -> VideoConfig:
    """The checkpoint's video_preprocessor_config.json (DEFAULTS where it is absent)."""
    path = Path(checkpoint_dir) / VIDEO_FILE
    try:
        raw = {**DEFAULTS, **json.loads(path.read_text())} if path.is_file() else dict(DEFAULTS)
    except ValueError as e:
        raise InvalidArgument(f"{path}: not JSON: {e}") from None
    size = raw.get("size") or DEFAULTS["size"]
    return VideoConfig(int(raw.get("temporal_patch_size", temporal_patch_size)), float(raw["fps"]),
                       int(raw["min_frames"]), int(raw["max_frames"]), bool(raw["do_sample_frames"]),
                       int(raw.get("min_pixels", size["shortest_edge"])),
                       int(raw.get("max_pixels", size["longest_edge"])))


def sample_indices(total: int, video_fps: float, config: VideoConfig, field: str) -> list[int]:
    """The frame indices transformers' sample_frames picks from `total` frames at `video_fps`."""
    t = config.temporal_patch_size
    if not config.do_sample_frames:
        if total > config.max_frames:
            raise InvalidArgument(f"{field} has {total} frames, over the limit of {config.max_frames}")
        return list(range(total))
    most = math.floor(min(config.max_frames, total) / t) * t
    num = min(max(total / video_fps * config.fps, config.min_frames), most, total)
    num = math.floor(num / t) * t
    if num == 0:
        raise InvalidArgument(f"{field} has {total} frame(s): a video needs at least {t} (send one frame as an image)")
    return torch.arange(0, total, total / num).int().tolist()


def decode_gif(data: bytes, field: str, config: VideoConfig, max_frames: int, max_pixels: int) -> list:
    """GIF bytes -> the sampled frames as RGB PIL images (all of the clip's size)."""
    from engine.models.qwen3_omni.media_decode import check_aspect, open_pil

    clip = open_pil(data, field, max_pixels, "video", "a video frame")
    if clip.format != "GIF":
        raise InvalidArgument(f"{field}: unsupported video format {clip.format} (send an animated GIF)")
    width, height = clip.size
    if width * height > max_pixels or width == 0 or height == 0:
        raise InvalidArgument(f"{field} is {width} x {height} pixels a frame, outside 1..{max_pixels}")
    check_aspect(width, height, f"{field}'s frame")
    try:
        total = clip.n_frames
        if total > max_frames:
            raise InvalidArgument(f"{field} has {total} frames, over the limit of {max_frames}")
        durations = []
        for i in range(total):
            clip.seek(i)
            durations.append(int(clip.info.get("duration") or DEFAULT_FRAME_MS))
        indices = sample_indices(total, total / (sum(durations) / 1000.0), config, field)
        frames = []
        for i in indices:
            clip.seek(i)
            frames.append(clip.convert("RGB"))
    except (OSError, EOFError, ValueError, SyntaxError) as e:
        raise InvalidArgument(f"{field}: corrupt video data: {type(e).__name__}") from None
    return frames
