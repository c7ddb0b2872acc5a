"""POST /v1/chat/completions: messages in, text (and audio) out, as OpenAI's chat API.

`modalities` ["text"] (the default), ["text", "audio"] with `audio: {voice, format}`, or
["image"] (a model that draws: BAGEL). The text is the message's `content` (streamed as
`delta.content`); the audio rides beside it in `message.audio` ({id, data: base64,
expires_at, transcript}), streamed as `delta.audio.data` deltas of 16-bit PCM (format
pcm16 or wav: the header first). An image comes back in `message.images`, a list of
`{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}` (the shape
OpenRouter's image models answer in; OpenAI's chat API defines no image output),
streamed as one `delta.images` chunk when the image is done.
`max_tokens` / `max_completion_tokens`, `temperature`, `top_p` and `seed` map to the
model's params of those names (max_new_tokens for the first two). Content parts: text,
`input_audio` and `image_url` data URLs (gateway.content_parts).
"""
from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field

from client.events import AudioChunk, Image, TextDelta, Usage
from client.generate_call import GenerateCall, Message
from client.model_card import ModelCard
from gateway.api_error import bad_field
from gateway.audio_encoding import check_format, encode, pcm16, wav_header
from gateway.bodies import ChatBody
from gateway.conductor_calls import Primed
from gateway.content_parts import content_part
from gateway.extensions import end_user, request_params, voice_param
from gateway.sse import DONE, event

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
CHAT_AUDIO_FORMATS = {"pcm16": "pcm", "wav": "wav", "mp3": "mp3", "flac": "flac", "opus": "opus"}
STREAM_AUDIO_FORMATS = ("pcm16", "wav")


def chat_call(body: ChatBody, card: ModelCard, request_id: str) -> tuple[GenerateCall, dict[str, str]]:
    modalities = tuple(body.modalities or ("text",))
    for i, m in enumerate(modalities):
        if m not in ("text", "audio", "image") or not card.makes(m):
            raise bad_field("modalities", f"modalities[{i}] {m!r}: model {card.name!r} makes "
                                          f"{list(card.output_modalities)}")
    if "audio" in modalities and body.audio is None:
        raise bad_field("audio", "audio is required when modalities include 'audio' ({voice, format})")
    if body.n != 1:
        raise bad_field("n", f"n must be 1, got {body.n}")
    if not card.accepts_text:
        raise bad_field("messages", f"model {card.name!r} takes no text on this conductor")
    tokens_field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    mapped = {"max_new_tokens": getattr(body, tokens_field), "temperature": body.temperature, "top_p": body.top_p,
              "seed": body.seed}
    fields = {"params.max_new_tokens": tokens_field, "output_modalities": "modalities"}
    for key in [k for k, v in mapped.items() if v is not None and k not in card.params]:
        raise bad_field(fields.get(f"params.{key}", key), f"model {card.name!r} takes no {key}")
    if "audio" in modalities:
        _check_audio(body, card, mapped)
        fields[f"params.{card.voice_param}"] = "audio.voice"
    params = request_params(card, body.extensions(), mapped,
                            {k.removeprefix("params."): v for k, v in fields.items() if k.startswith("params.")})
    return GenerateCall(card.name, messages=_messages(body), params=params, output_modalities=modalities,
                        request_id=request_id, end_user=end_user(body.user)), fields


def _check_audio(body: ChatBody, card: ModelCard, mapped: dict) -> None:
    fmt = body.audio.format
    allowed = STREAM_AUDIO_FORMATS if body.stream else tuple(CHAT_AUDIO_FORMATS)
    if fmt not in allowed:
        raise bad_field("audio.format", f"audio.format must be one of {list(allowed)}"
                                        f"{' when streaming' if body.stream else ''}, got {fmt!r}")
    mapped.update(voice_param(card, body.audio.voice, "audio.voice"))


def _messages(body: ChatBody) -> tuple[Message, ...]:
    out = []
    for i, m in enumerate(body.messages):
        if m.role not in ROLES:
            raise bad_field(f"messages[{i}].role", f"messages[{i}].role must be one of {sorted(ROLES)}, got {m.role!r}")
        if isinstance(m.content, list):
            content = tuple(content_part(part, f"messages[{i}].content[{j}]") for j, part in enumerate(m.content))
        else:
            content = (m.content or "",)
        out.append(Message(ROLES[m.role], content))
    return tuple(out)


@dataclass
class ChatResult:
    """What a chat request made: its text, 16-bit PCM, images (PNG) and usage."""
    text: list[str] = field(default_factory=list)
    pcm: list[bytes] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list)
    sample_rate: int = 0
    usage: Usage = field(default_factory=Usage)

    def add(self, ev) -> None:
        if isinstance(ev, TextDelta):
            self.text.append(ev.text)
        elif isinstance(ev, AudioChunk):
            self.pcm.append(pcm16(ev.samples))
            self.sample_rate = ev.sample_rate
        elif isinstance(ev, Image):
            self.images.append(ev.data)
        elif isinstance(ev, Usage):
            self.usage = ev


def finish_reason(body: ChatBody, card: ModelCard, usage: Usage) -> str:
    """"length" when the text reached its token budget, "stop" otherwise."""
    limit = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if limit is None and "max_new_tokens" in card.params:
        limit = card.params["max_new_tokens"].default
    return "length" if limit and usage.completion_tokens >= int(limit) else "stop"


def image_part(png: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}


def usage_json(usage: Usage) -> dict:
    """OpenAI's usage, cached prompt tokens included; with `keep_context`, the kept
    context's id (send it back as `context_id` to continue the conversation)."""
    out = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
           "total_tokens": usage.prompt_tokens + usage.completion_tokens,
           "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens}}
    if usage.context_id:
        out["context_id"] = usage.context_id
    return out


async def chat_response(body: ChatBody, card: ModelCard, request_id: str, primed: Primed) -> dict:
    result = ChatResult()
    async for ev in primed.all():
        result.add(ev)
    text = "".join(result.text)
    message = {"role": "assistant", "content": text}
    if body.modalities and "audio" in body.modalities:
        fmt = CHAT_AUDIO_FORMATS[body.audio.format]
        data = encode(fmt, b"".join(result.pcm), result.sample_rate or card.sample_rate)
        message["audio"] = {"id": f"audio-{request_id}", "data": base64.b64encode(data).decode(),
                            "expires_at": int(time.time()) + 3600, "transcript": text}
    if result.images:
        message["images"] = [image_part(png) for png in result.images]
    return {"id": f"chatcmpl-{request_id}", "object": "chat.completion", "created": int(time.time()),
            "model": card.name, "choices": [{"index": 0, "message": message, "logprobs": None,
                                             "finish_reason": finish_reason(body, card, result.usage)}],
            "usage": usage_json(result.usage)}


async def chat_stream(body: ChatBody, card: ModelCard, request_id: str, primed: Primed):
    """SSE chunks: the role, content and audio deltas, the finish reason, usage (when
    stream_options.include_usage), [DONE]."""
    head = {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": card.name}

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return event({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    usage, audio_id = Usage(), f"audio-{request_id}"
    if body.modalities and "audio" in body.modalities and body.audio.format == "wav":
        yield chunk({"audio": {"id": audio_id, "data": base64.b64encode(wav_header(card.sample_rate)).decode()}})
    async for ev in primed.all():
        if isinstance(ev, TextDelta) and ev.text:
            yield chunk({"content": ev.text})
        elif isinstance(ev, AudioChunk):
            yield chunk({"audio": {"id": audio_id, "data": base64.b64encode(pcm16(ev.samples)).decode()}})
        elif isinstance(ev, Image):
            yield chunk({"images": [image_part(ev.data)]})
        elif isinstance(ev, Usage):
            usage = ev
    yield chunk({}, finish_reason(body, card, usage))
    if body.stream_options is not None and body.stream_options.include_usage:
        yield event({**head, "choices": [], "usage": usage_json(usage)})
    yield DONE
