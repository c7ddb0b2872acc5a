"""Chat content parts carrying media (ContentPart.audio / .image / .video) checked at the
front door, before any work: a known format read from the bytes (WAV; PNG or JPEG; GIF), not empty,
within max_input_bytes, a mime_type that agrees, at most max_inputs media parts per request.
Decoding (and the limits on duration and pixels) happens on the encoder service.

The parts, of any kinds in any order, become one list in prompt order: the walk inputs
`media` (uint8 [n]: every part's file, concatenated) and `media_parts` (int64 [k, 2]: per
part, its kind code (MEDIA_KINDS) and its byte length).

    media = MediaParts(limits)
    media.add(kind, part, "messages[2].content[0]")   # InvalidArgument naming that field
    media.inputs()                                    # {"media": (uint8 [n],), "media_parts": (int64 [k, 2],)}
"""
from __future__ import annotations

from conductor.input_limits import InputLimits
from core.errors import InvalidArgument
from core.media_kinds import MEDIA_KINDS, media_manifest

# The kind codes of media_parts: the encoder service reads the same (services/encoder/media_list.py).
MEDIA_INPUTS = ("media", "media_parts")

# format -> (magic test, mime types it answers to)
FORMATS = {
    "audio": {"wav": (lambda b: b[:4] == b"RIFF" and b[8:12] == b"WAVE", ("audio/wav", "audio/x-wav",
                                                                          "audio/wave"))},
    "image": {"png": (lambda b: b[:8] == b"\x89PNG\r\n\x1a\n", ("image/png",)),
              "jpeg": (lambda b: b[:3] == b"\xff\xd8\xff", ("image/jpeg", "image/jpg"))},
    "video": {"gif": (lambda b: b[:6] in (b"GIF87a", b"GIF89a"), ("image/gif", "video/gif"))},
}


def media_format(kind: str, data: bytes, mime_type: str, where: str) -> str:
    """The format of `data` ("wav", "png", "jpeg", "gif"); InvalidArgument naming `where` otherwise."""
    if not data:
        raise InvalidArgument(f"{where}.{kind}.data is empty")
    found = next((name for name, (test, _) in FORMATS[kind].items() if test(data)), None)
    if found is None:
        known = ", ".join(FORMATS[kind])
        raise InvalidArgument(f"{where}.{kind}: unsupported or corrupt {kind} (the bytes are not {known})")
    mimes = FORMATS[kind][found][1]
    if mime_type and mime_type.lower() not in mimes:
        raise InvalidArgument(f"{where}.{kind}.mime_type {mime_type[:64]!r} disagrees with the bytes ({found})")
    return found


class MediaParts:
    def __init__(self, limits: InputLimits) -> None:
        self.limits = limits
        self.found: list[tuple[str, bytes, str]] = []  # (kind, bytes, the field that sent them), prompt order

    def add(self, kind: str, part, where: str) -> None:
        data = bytes(part.data)
        if len(data) > self.limits.max_input_bytes:
            raise InvalidArgument(f"{where}.{kind} is {len(data)} bytes, over the limit of "
                                  f"{self.limits.max_input_bytes} (max_input_bytes)")
        media_format(kind, data, part.mime_type, where)
        if len(self.found) >= self.limits.max_inputs:
            raise InvalidArgument(f"{where}: over the limit of {self.limits.max_inputs} media parts per request "
                                  "(max_inputs)")
        self.found.append((kind, data, where))

    def check_model(self, input_names: set[str], model_name: str) -> None:
        """The model's walks take media parts."""
        if self.found and not set(MEDIA_INPUTS) <= input_names:
            kind, _, where = self.found[0]
            raise InvalidArgument(f"{where}: model {model_name!r} takes no {kind} here")

    def inputs(self) -> dict:
        import torch

        if not self.found:
            return {}
        blob = b"".join(data for _, data, _ in self.found)
        table = media_manifest([(kind, data) for kind, data, _ in self.found])
        return {"media": (torch.frombuffer(bytearray(blob), dtype=torch.uint8),),
                "media_parts": (torch.tensor(table, dtype=torch.int64),)}

    def __bool__(self) -> bool:
        return bool(self.found)
