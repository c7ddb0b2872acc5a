"""An 8-bit RGB image as PNG bytes: what the front door sends as an `Image` event.

Filter 0 rows in one zlib stream: no imaging library is needed, and any PNG reader
(PIL, browsers) reads it back to the same pixels.
"""
from __future__ import annotations

import zlib

MIME_TYPE = "image/png"
_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def encode_png(rgb) -> bytes:
    """rgb: uint8 [H, W, 3] (a torch tensor or numpy array) -> PNG bytes."""
    height, width, channels = (int(d) for d in rgb.shape)
    if channels != 3:
        raise ValueError(f"image must be [H, W, 3], got shape {tuple(rgb.shape)}")
    data = rgb.contiguous().numpy().tobytes() if hasattr(rgb, "contiguous") else rgb.tobytes()
    stride = width * 3
    raw = b"".join(b"\x00" + data[y * stride:(y + 1) * stride] for y in range(height))
    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")
