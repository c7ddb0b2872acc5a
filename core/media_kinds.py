"""The media a prompt part may carry, and how a request's media parts travel to the
encoder service: one blob of the parts' files in prompt order and a manifest of
(kind code, byte length) per part, where the kind code indexes MEDIA_KINDS."""
from __future__ import annotations

MEDIA_KINDS = ("audio", "image", "video")


def media_manifest(parts: list[tuple[str, bytes]]) -> list[list[int]]:
    """[[kind code, byte length], ...] of parts (kind, file bytes), in their order."""
    return [[MEDIA_KINDS.index(kind), len(data)] for kind, data in parts]
