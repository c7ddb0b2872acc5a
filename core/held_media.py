"""The media parts of a request that the kept context it continues holds already.

The conductor records, per kept context, the digests (SHA-256 of each part's file bytes)
of the media parts the requests that built it sent (conductor/kept_contexts.py). A
request continuing it gets the walk input HELD_MEDIA, int64 [k]: 1 where its part k is
among them, so the model's first walk may skip encoding those parts again (BAGEL's
`edit_held`). No walk reads it through an edge, so no client can send it.
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping

HELD_MEDIA = "held_media"


def part_digests(media: bytes, sizes: list[int]) -> list[str]:
    """Each part's digest: media is the parts' bytes concatenated, sizes their lengths."""
    out, at = [], 0
    for size in sizes:
        out.append(hashlib.sha256(media[at:at + size]).hexdigest())
        at += size
    return out


def is_held(inputs: Mapping[str, Any]) -> bool:
    """Whether the request's inputs say every one of its media parts is held (a walk input
    is a one-item tuple)."""
    held = inputs.get(HELD_MEDIA)
    return bool(held) and bool(held[0].numel()) and bool(held[0].all())
