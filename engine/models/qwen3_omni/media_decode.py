"""Raw media bytes a client sent -> samples or pixels, with every way they can be bad
reported as InvalidArgument naming the field.

Audio: WAV (PCM 8/16/24/32-bit, any channels, mixed down to mono) through the standard
library's `wave`, resampled to the tower's rate. Images: PNG or JPEG through Pillow,
converted to RGB. Limits are checked before the expensive step: an image's size and aspect
ratio from its header before its pixels are decoded, a clip's duration before it is resampled.
"""
from __future__ import annotations

import io
import wave
from dataclasses import dataclass

import numpy as np

from core.errors import InvalidArgument
from engine.models.qwen3_omni.resample import resample

IMAGE_FORMATS = ("PNG", "JPEG")
# The image processor's own bound (Qwen2-VL's smart_resize refuses a longer side over 200
# times the shorter): checked from the header, a 1 x 20000 image is the client's error.
MAX_ASPECT_RATIO = 200


@dataclass(frozen=True)
class MediaLimits:
    max_audio_seconds: float = 300.0
    max_image_pixels: int = 4096 * 4096   # width x height of the decoded image
    max_bytes: int = 64 << 20             # encoded size of one media part
    max_video_frames: int = 4096          # frames in a video file (each is seeked to read its duration)

    def __post_init__(self) -> None:
        for name in ("max_audio_seconds", "max_image_pixels", "max_bytes", "max_video_frames"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"MediaLimits.{name} must be > 0, got {getattr(self, name)}")


def check_bytes(data: bytes, field: str, limits: MediaLimits) -> None:
    if not data:
        raise InvalidArgument(f"{field} is empty")
    if len(data) > limits.max_bytes:
        raise InvalidArgument(f"{field} is {len(data)} bytes, over the limit of {limits.max_bytes}")


def _pcm(frames: bytes, width: int, channels: int) -> np.ndarray:
    """Interleaved little-endian PCM -> [n, channels] float32 in [-1, 1)."""
    if width == 1:  # 8-bit WAV is unsigned
        return (np.frombuffer(frames, np.uint8).astype(np.float32) - 128.0).reshape(-1, channels) / 128.0
    if width == 3:
        raw = np.frombuffer(frames, np.uint8).reshape(-1, 3).astype(np.int32)
        ints = (raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)) << 8 >> 8  # sign-extend 24 bits
        return (ints.astype(np.float32) / float(1 << 23)).reshape(-1, channels)
    dtype = {2: np.int16, 4: np.int32}[width]
    return np.frombuffer(frames, dtype).astype(np.float32).reshape(-1, channels) / float(1 << (8 * width - 1))


def decode_audio(data: bytes, field: str, rate: int, limits: MediaLimits = MediaLimits()) -> np.ndarray:
    """WAV bytes -> mono float32 samples [n > 0] at `rate` Hz."""
    check_bytes(data, field, limits)
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InvalidArgument(f"{field}: unsupported audio format (send a PCM WAV file)")
    try:
        with wave.open(io.BytesIO(data)) as w:
            channels, width, src_rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            if width not in (1, 2, 3, 4) or channels < 1 or src_rate <= 0:
                raise InvalidArgument(f"{field}: unsupported WAV ({width}-byte samples, {channels} channels)")
            if n / src_rate > limits.max_audio_seconds:
                raise InvalidArgument(f"{field} is {n / src_rate:.1f} s long, over the limit of "
                                      f"{limits.max_audio_seconds:g} s")
            frames = w.readframes(n)
    except (wave.Error, EOFError, ValueError) as e:
        raise InvalidArgument(f"{field}: corrupt or unsupported WAV: {e}") from None
    usable = len(frames) - len(frames) % (width * channels)
    if usable == 0:
        raise InvalidArgument(f"{field} holds no audio samples")
    mono = _pcm(frames[:usable], width, channels).mean(axis=1)
    return resample(mono.astype(np.float32), src_rate, rate)


def open_pil(data: bytes, field: str, max_pixels: int, kind: str, one: str):
    """Pillow's view of image or video bytes (lazy: pixels decode on access); InvalidArgument
    naming `field` for unreadable bytes or a decompression bomb. kind: "image" or "video";
    one: how one of its pictures is named ("an image", "a video frame")."""
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(io.BytesIO(data))
    except Image.DecompressionBombError:
        raise InvalidArgument(f"{field} is too large {one} (over {max_pixels} pixels)") from None
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise InvalidArgument(f"{field}: not a readable {kind}: {type(e).__name__}") from None


def check_aspect(width: int, height: int, field: str) -> None:
    """width x height > 0, sides at most MAX_ASPECT_RATIO apart."""
    if width == 0 or height == 0:
        raise InvalidArgument(f"{field} has no pixels ({width} x {height})")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise InvalidArgument(f"{field} is {width} x {height} pixels: its longer side is over {MAX_ASPECT_RATIO} "
                              "times its shorter one")


def decode_image(data: bytes, field: str, limits: MediaLimits = MediaLimits()):
    """PNG/JPEG bytes -> an RGB PIL image."""
    check_bytes(data, field, limits)
    image = open_pil(data, field, limits.max_image_pixels, "image", "an image")
    if image.format not in IMAGE_FORMATS:
        raise InvalidArgument(f"{field}: unsupported image format {image.format} (send {' or '.join(IMAGE_FORMATS)})")
    width, height = image.size
    if width * height > limits.max_image_pixels:
        raise InvalidArgument(f"{field} is {width} x {height} pixels, over the limit of {limits.max_image_pixels}")
    check_aspect(width, height, field)
    try:
        image.load()
    except (OSError, ValueError, SyntaxError) as e:
        raise InvalidArgument(f"{field}: corrupt image data: {type(e).__name__}") from None
    return image.convert("RGB")
