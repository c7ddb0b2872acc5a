"""The OpenAI request bodies the gateway reads (pydantic: a wrong type is a 400 naming
the field, gateway.app). Fields OpenAI defines and this gateway cannot honour are refused
by the route, naming them; any other key is an extension: a request param of the model
(ListModels' params, e.g. `seed`, `steps`, `max_frames`), passed to the conductor as is.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    def extensions(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SpeechBody(Body):
    model: str
    input: str = Field(min_length=1)
    voice: str | None = None
    response_format: str = "mp3"
    speed: float = 1.0
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
    text: str | None = None
    input_audio: InputAudio | None = None
    image_url: ImageUrl | None = None
    video_url: VideoUrl | None = None


class ChatMessageBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[ContentPartBody] | None = None


class ChatAudio(BaseModel):
    voice: str | None = None
    format: str = "wav"


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatBody(Body):
    model: str
    messages: list[ChatMessageBody] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    modalities: list[str] | None = None
    audio: ChatAudio | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    n: int = 1
    user: str | None = None


class ImageBody(Body):
    prompt: str = Field(min_length=1)
    model: str | None = None
    n: int = Field(1, ge=1, le=10)
    size: str | None = None
    response_format: str = "b64_json"
    quality: str | None = None
    style: str | None = None
    user: str | None = None
