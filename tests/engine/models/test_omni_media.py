"""Media bytes -> tower inputs with the checkpoint's own processor configuration; every bad
medium is InvalidArgument naming the field."""
from __future__ import annotations

import io
import math
import wave

import numpy as np
import pytest
import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.media_decode import MediaLimits, decode_audio
from engine.models.qwen3_omni.media_features import MediaFeatures
from engine.models.qwen3_omni.resample import resample

FIELD = "messages[0].content[1].audio"


def wav_bytes(samples: np.ndarray, rate: int = 16000, width: int = 2, channels: int = 1) -> bytes:
    """float samples [n] in [-1, 1] -> a PCM WAV of `width`-byte samples, the clip on every channel."""
    scale = float(1 << (8 * width - 1)) - 1
    ints = np.round(np.clip(samples, -1, 1) * scale).astype(np.int64)
    ints = np.repeat(ints[:, None], channels, axis=1).reshape(-1)
    if width == 3:
        raw = ints.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    else:
        raw = ints.astype({1: np.uint8, 2: "<i2", 4: "<i4"}[width]).tobytes() if width > 1 else \
            (ints + 128).astype(np.uint8).tobytes()
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)
    return buf.getvalue()


def png_bytes(width: int, height: int, seed: int = 0, fmt: str = "PNG") -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)
    return buf.getvalue()


def sine(freq: float, seconds: float, rate: int) -> np.ndarray:
    return (0.5 * np.sin(2 * math.pi * freq * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


@pytest.fixture(scope="module")
def features(tiny_omni):
    return MediaFeatures.from_checkpoint(tiny_omni)


def test_wav_at_16k_gives_the_extractors_frames(features):
    clip = sine(440, 2.0, 16000)
    mel = features.audio(wav_bytes(clip), FIELD)
    ref = features.feature_extractor([decode_audio(wav_bytes(clip), FIELD, 16000)], sampling_rate=16000,
                                     return_tensors="pt", padding=True, truncation=False)["input_features"][0]
    assert mel.shape == (16, 200)
    torch.testing.assert_close(mel, ref[:, :200])


@pytest.mark.parametrize("width,channels,rate", [(1, 1, 8000), (2, 2, 44100), (3, 1, 48000), (4, 2, 22050)])
def test_pcm_widths_channels_and_rates_decode_to_16k_mono(width, channels, rate):
    samples = decode_audio(wav_bytes(sine(300, 1.0, rate), rate, width, channels), FIELD, 16000)
    assert samples.dtype == np.float32 and abs(len(samples) - 16000) <= 1
    expected = sine(300, 1.0, 16000)
    core = slice(400, 15600)  # away from the clip's edges, where the filter sees zeros
    tolerance = 0.02 if width > 1 else 0.05  # 8-bit PCM is coarse
    assert np.abs(samples[core] - expected[core]).max() < tolerance


def test_resampling_removes_what_16k_cannot_hold():
    tone = sine(11000, 1.0, 48000)  # above 8 kHz: must vanish, not alias down to 5 kHz
    assert np.abs(resample(tone, 48000, 16000)[400:-400]).max() < 0.01


def test_png_and_jpeg_give_the_processors_patches(features):
    from PIL import Image

    for fmt in ("PNG", "JPEG"):
        data = png_bytes(224, 224, fmt=fmt)
        pixels, grid = features.image(data, "image")
        assert grid == (1, 14, 14) and pixels.shape == (196, 3 * 2 * 16 * 16)
        ref = features.image_processor(images=[Image.open(io.BytesIO(data)).convert("RGB")], return_tensors="pt")
        torch.testing.assert_close(pixels, ref["pixel_values"])


def _gif() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="GIF")
    return buf.getvalue()


BAD_AUDIO = {
    "empty": (b"", "is empty"),
    "not a wav": (b"ID3\x04" + bytes(64), "unsupported audio format"),
    "truncated header": (wav_bytes(sine(440, 0.5, 16000))[:30], "corrupt"),
    "no samples": (wav_bytes(np.zeros(0, np.float32)), "no audio samples"),
    "too long": (wav_bytes(np.zeros(31 * 16000, np.float32)), "over the limit"),
    "shorter than a frame": (wav_bytes(np.zeros(100, np.float32)), "shorter than one"),
}


@pytest.mark.parametrize("case", sorted(BAD_AUDIO))
def test_bad_audio_is_invalid_argument_naming_the_field(case, features):
    data, message = BAD_AUDIO[case]
    with pytest.raises(InvalidArgument, match=message) as info:
        features.audio(data, FIELD)
    assert FIELD in str(info.value)


BAD_IMAGES = {
    "empty": (lambda: b"", "is empty"),
    "not an image": (lambda: b"hello, world" * 10, "not a readable image"),
    "gif": (_gif, "unsupported image format"),
    "corrupt": (lambda: png_bytes(64, 64)[:200], "corrupt"),
    "too large": (lambda: png_bytes(300, 300), "over the limit"),
}


@pytest.mark.parametrize("case", sorted(BAD_IMAGES))
def test_bad_images_are_invalid_argument_naming_the_field(case, features):
    make, message = BAD_IMAGES[case]
    small = MediaFeatures(features.feature_extractor, features.image_processor,
                          MediaLimits(max_image_pixels=256 * 256))
    with pytest.raises(InvalidArgument, match=message) as info:
        small.image(make(), "messages[0].content[0].image")
    assert "messages[0].content[0].image" in str(info.value)


def test_limits_name_the_bad_field():
    with pytest.raises(InvalidArgument, match="max_audio_seconds"):
        MediaLimits(max_audio_seconds=0)
