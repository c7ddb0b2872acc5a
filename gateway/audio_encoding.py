"""The conductor's audio (mono float32 samples) in the formats OpenAI's speech API names.

pcm: raw 16-bit signed little-endian samples, as `starmesh speak` writes them into its
WAV (clipped to [-1, 1], times 32767, rounded half to even). wav: the same samples
after a 44-byte header; a streamed WAV's header gives the largest sizes instead (the
length is unknown until the end), as streaming servers do. flac, mp3, opus (in Ogg):
libsndfile through soundfile, encoded once the audio is complete.
"""
from __future__ import annotations

import io
import struct

import numpy as np

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
STREAMABLE = ("wav", "pcm")            # bytes go out as each chunk arrives
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
               "wav": "audio/wav", "pcm": "audio/pcm"}
_SOUNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS")}
_STREAMED_SIZE = 0xFFFFFFFF            # RIFF and data sizes of a WAV whose length is not known yet


def pcm16(samples_f32le: bytes) -> bytes:
    """float32 little-endian samples -> int16 little-endian bytes."""
    x = np.frombuffer(samples_f32le, dtype="<f4")
    return np.round(np.clip(x, -1.0, 1.0) * np.float32(32767.0)).astype("<i2").tobytes()


def wav_header(sample_rate: int, num_samples: int | None = None) -> bytes:
    """The 44-byte header of a mono 16-bit PCM WAV; num_samples None: streamed."""
    data = _STREAMED_SIZE if num_samples is None else 2 * num_samples
    riff = _STREAMED_SIZE if num_samples is None else 36 + data
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16) + b"data" + struct.pack("<I", data))


def encode(fmt: str, pcm: bytes, sample_rate: int) -> bytes:
    """A whole clip (int16 little-endian `pcm`) in `fmt` (one of FORMATS but aac)."""
    if fmt == "pcm":
        return pcm
    if fmt == "wav":
        return wav_header(sample_rate, len(pcm) // 2) + pcm
    import soundfile

    container, subtype = _SOUNDFILE[fmt]
    out = io.BytesIO()
    soundfile.write(out, np.frombuffer(pcm, dtype="<i2"), sample_rate, format=container, subtype=subtype)
    return out.getvalue()


def check_format(fmt: str, param: str) -> None:
    """ValueError naming `param` for a format this gateway cannot write."""
    if fmt not in FORMATS:
        raise ValueError(f"{param} must be one of {list(FORMATS)}, got {fmt!r}")
    if fmt == "aac":
        raise ValueError(f"{param} 'aac' is not supported here (no AAC encoder); use mp3, opus, flac, wav or pcm")
