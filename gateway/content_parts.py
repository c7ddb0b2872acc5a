"""OpenAI chat content parts -> the conductor's: `text`, `input_audio` ({data: base64,
format: "wav"}), `image_url` (a `data:image/png;base64,...` or image/jpeg URL) and, an
extension OpenAI does not define (vLLM's part), `video_url` (a `data:video/gif;base64,...`
or image/gif URL: an animated GIF). The gateway fetches no URL: a remote image would let
any caller make it reach any address, so only data URLs are taken. The conductor checks
the media themselves (format, size)."""
from __future__ import annotations

import base64
import binascii

from client.generate_call import Media
from gateway.api_error import bad_field

AUDIO_FORMATS = {"wav": "audio/wav"}
IMAGE_TYPES = ("image/png", "image/jpeg")
VIDEO_TYPES = ("video/gif", "image/gif")


def content_part(part, where: str) -> str | Media:
    """One part of messages[i].content (`where` names it in errors)."""
    if part.type == "text" and part.text is not None:
        return part.text
    if part.type == "input_audio" and part.input_audio is not None:
        fmt = part.input_audio.format
        if fmt not in AUDIO_FORMATS:
            raise bad_field(f"{where}.input_audio.format", f"{where}.input_audio.format must be one of "
                                                           f"{list(AUDIO_FORMATS)}, got {fmt!r}")
        return Media("audio", _b64(part.input_audio.data, f"{where}.input_audio.data"), AUDIO_FORMATS[fmt])
    if part.type == "image_url" and part.image_url is not None:
        mime, data = _data_url(part.image_url.url, f"{where}.image_url.url", IMAGE_TYPES)
        return Media("image", data, mime)
    if part.type == "video_url" and part.video_url is not None:
        mime, data = _data_url(part.video_url.url, f"{where}.video_url.url", VIDEO_TYPES)
        return Media("video", data, mime)
    raise bad_field(where, f"{where}: a part of type {part.type!r} with its field set is needed: text, input_audio, "
                           "image_url or video_url")


def _b64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_field(where, f"{where} is not valid base64") from None


def _data_url(url: str, where: str, types: tuple[str, ...]) -> tuple[str, bytes]:
    """(media type, bytes) of a base64 data URL of one of `types`."""
    if not url.startswith("data:"):
        raise bad_field(where, f"{where}: only data URLs (data:<media type>;base64,...) are accepted; the "
                               "gateway fetches no remote file")
    head, sep, payload = url[len("data:"):].partition(",")
    mime, _, encoding = head.partition(";")
    if not sep or encoding != "base64":
        raise bad_field(where, f"{where}: expected data:<media type>;base64,<data>")
    if mime not in types:
        raise bad_field(where, f"{where}: media type must be one of {list(types)}, got {mime!r}")
    return mime, _b64(payload, where)
