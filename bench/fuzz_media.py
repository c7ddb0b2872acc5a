"""Media files for the fuzz suite: small valid ones (the seeds' content parts) and hostile
ones (random bytes behind a real magic number, truncated files, a 1 x 20000 JPEG, a
one-frame GIF, a WAV whose header lies), as bytes and as a hypothesis strategy.

    png(28, 28), wav(0.5), gif(4), jpeg(1, 20000)
    S_MEDIA_PART     # (kind, bytes, mime type) of a content part, valid or hostile
"""
from __future__ import annotations

import functools
import io
import struct
import wave

from hypothesis import strategies as st

MAGIC = {"image": (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"), "audio": (b"RIFF\x00\x00\x00\x00WAVE",),
         "video": (b"GIF89a",)}
MIMES = ("", "image/png", "image/jpeg", "audio/wav", "image/gif", "video/gif", "text/plain", "x" * 300)


def _image(width: int, height: int, fmt: str, frames: int = 1) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    pictures = [Image.new("RGB", (width, height), (40 * i % 256, 90, 160)) for i in range(frames)]
    extra = {"save_all": True, "append_images": pictures[1:], "duration": 100, "loop": 0} if frames > 1 else {}
    pictures[0].save(out, fmt, **extra)
    return out.getvalue()


@functools.lru_cache(maxsize=None)
def png(width: int, height: int) -> bytes:
    return _image(width, height, "PNG")


@functools.lru_cache(maxsize=None)
def jpeg(width: int, height: int) -> bytes:
    return _image(width, height, "JPEG")


@functools.lru_cache(maxsize=None)
def gif(frames: int, side: int = 28) -> bytes:
    return _image(side, side, "GIF", frames)


@functools.lru_cache(maxsize=None)
def wav(seconds: float, rate: int = 16000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(struct.pack(f"<{int(seconds * rate)}h", *(((i * 37) % 2000) - 1000
                                                                  for i in range(int(seconds * rate)))))
    return out.getvalue()


def lying_wav() -> bytes:
    """A WAV header claiming a day of 8-channel audio over a few bytes."""
    return b"RIFF" + struct.pack("<I", 36) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 8, 48000, 0, 16, 16) + \
        b"data" + struct.pack("<I", 0xFFFFFFF0) + b"\x00" * 16


@functools.lru_cache(maxsize=1)
def hostile_files() -> dict[str, tuple[bytes, ...]]:
    """kind -> files a client might send as that kind: valid, odd or broken."""
    return {"image": (png(28, 28), png(1, 1), jpeg(1, 20000), jpeg(20000, 1), jpeg(56, 42)[:200], png(28, 28)[:60],
                      gif(2)),
            "audio": (wav(0.5), wav(0.001), lying_wav(), wav(0.5)[:50], png(4, 4)),
            "video": (gif(4), gif(1), gif(4)[:80], png(28, 28))}


@st.composite
def media_part(draw) -> tuple[str, bytes, str]:
    kind = draw(st.sampled_from(("image", "audio", "video")))
    source = draw(st.sampled_from(("file", "file", "magic", "random")))
    if source == "file":
        data = draw(st.sampled_from(hostile_files()[kind]))
    elif source == "magic":
        data = draw(st.sampled_from(MAGIC[kind])) + draw(st.binary(max_size=64))
    else:
        data = draw(st.binary(max_size=64))
    return kind, data, draw(st.sampled_from(MIMES))


S_MEDIA_PART = media_part()
