"""The OpenAI request bodies the gateway reads (pydantic: a wrong type is a 400 naming
the field, gateway.app). Fields OpenAI defines and this gateway cannot honour are refused
by the route, naming them; any other key is an extension: a request param of the model
(ListModels' params, e.g. `seed`, `steps`, `max_frames`), checked against the model's
card (gateway.param_check) and passed to the conductor.

Numbers are strict: an integer field takes a JSON integer (not 4.0, "4" or true), a
number field any finite JSON number (NaN and the infinities, which Python's json reads,
are refused, as is 1e400, which it reads as infinity). Text sent to the conductor must
be encodable as UTF-8: JSON lets a string carry a lone surrogate ("\ud800"), which
protobuf cannot encode.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict

_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_text(value: str) -> str:
    if not value.isascii() and _SURROGATE.search(value):
        raise ValueError("must be valid Unicode text (it holds a lone surrogate, which UTF-8 cannot encode)")
    return value


Text = Annotated[str, AfterValidator(utf8_text)]
Int = Annotated[int, Strict()]
Number = Annotated[float, Strict()]       # a JSON integer is a number too
Flag = Annotated[bool, Strict()]


class Body(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    def extensions(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SpeechBody(Body):
    model: str
    input: Text = Field(min_length=1)
    voice: str | None = None
    response_format: str = "mp3"
    speed: Number = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    instructions: str | None = None


class InputAudio(BaseModel):
    data: str              # base64 of the file
    format: str


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str               # a data URL: data:image/png;base64,...
    detail: str | None = None


class VideoUrl(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str               # a data URL: data:video/gif;base64,... (an extension, as vLLM's video_url)


class ContentPartBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: Text | None = None
    input_audio: InputAudio | None = None
    image_url: ImageUrl | None = None
    video_url: VideoUrl | None = None


class ChatMessageBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: Text | list[ContentPartBody] | None = None


class ChatAudio(BaseModel):
    voice: str | None = None
    format: str = "wav"


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: Flag = False


class ChatBody(Body):
    model: str
    messages: list[ChatMessageBody] = Field(min_length=1)
    stream: Flag = False
    stream_options: StreamOptions | None = None
    modalities: list[str] | None = None
    audio: ChatAudio | None = None
    max_tokens: Int | None = None
    max_completion_tokens: Int | None = None
    temperature: Number | None = None
    top_p: Number | None = None
    seed: Int | None = None
    n: Int = 1
    user: str | None = None


class ImageBody(Body):
    prompt: Text = Field(min_length=1)
    model: str | None = None
    n: Int = Field(1, ge=1, le=10)
    size: str | None = None
    response_format: str = "b64_json"
    quality: str | None = None
    style: str | None = None
    user: str | None = None
