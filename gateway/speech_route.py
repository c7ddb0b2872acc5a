"""POST /v1/audio/speech: text in, audio out, as OpenAI's speech API.

`voice` is the model's voice param (ListModels' voice_param: `speaker` for Qwen3-Omni,
`voice` for Orpheus); `speed` is 1.0 only. wav and pcm stream as the audio is made
(`stream_format` "audio": the bytes; "sse": `speech.audio.delta` events with base64
audio, then `speech.audio.done` with usage); flac, mp3 and opus are encoded once the
audio is complete, then sent (as one delta with "sse").
"""
from __future__ import annotations

import base64
from typing import AsyncIterator

from client.events import AudioChunk, Usage
from client.generate_call import GenerateCall
from client.model_card import ModelCard
from gateway.api_error import bad_field
from gateway.audio_encoding import MEDIA_TYPES, STREAMABLE, check_format, encode, pcm16, wav_header
from gateway.bodies import SpeechBody
from gateway.conductor_calls import Primed
from gateway.extensions import request_params, voice_param
from gateway.sse import MEDIA_TYPE as SSE
from gateway.sse import event


def speech_call(body: SpeechBody, card: ModelCard, request_id: str) -> tuple[GenerateCall, dict[str, str]]:
    """(the conductor request, conductor field -> body field) for a checked body."""
    if not card.makes("audio"):
        raise bad_field("model", f"model {card.name!r} makes no audio (it makes {list(card.output_modalities)})")
    if not card.accepts_text:
        raise bad_field("input", f"model {card.name!r} takes no text on this conductor")
    try:
        check_format(body.response_format, "response_format")
    except ValueError as e:
        raise bad_field("response_format", str(e)) from None
    if body.speed != 1.0:
        raise bad_field("speed", f"speed must be 1.0 (this gateway does not change tempo), got {body.speed}")
    if body.instructions:
        raise bad_field("instructions", f"instructions are not supported by model {card.name!r}")
    params = request_params(card, body.extensions(), voice_param(card, body.voice, "voice"),
                            {card.voice_param: "voice"})
    fields = {"text": "input", **({f"params.{card.voice_param}": "voice"} if card.voice_param else {})}
    return GenerateCall(card.name, text=body.input, params=params, output_modalities=("audio",),
                        request_id=request_id), fields


def media_type(body: SpeechBody) -> str:
    return SSE if body.stream_format == "sse" else MEDIA_TYPES[body.response_format]


async def speech_bytes(body: SpeechBody, card: ModelCard, primed: Primed) -> AsyncIterator[bytes]:
    """The response body: audio bytes (or SSE events) as the chunks arrive."""
    rate, usage = card.sample_rate, Usage()
    streamed = body.response_format in STREAMABLE
    whole = []
    if body.response_format == "wav" and streamed:
        yield _out(body, wav_header(rate))
    async for ev in primed.all():
        if isinstance(ev, AudioChunk):
            pcm = pcm16(ev.samples)
            rate = ev.sample_rate
            if streamed:
                yield _out(body, pcm)
            else:
                whole.append(pcm)
        elif isinstance(ev, Usage):
            usage = ev
    if not streamed:
        yield _out(body, encode(body.response_format, b"".join(whole), rate))
    if body.stream_format == "sse":
        tokens = {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
                  "total_tokens": usage.prompt_tokens + usage.completion_tokens}
        yield event({"type": "speech.audio.done", "usage": tokens})


def _out(body: SpeechBody, data: bytes) -> bytes:
    if body.stream_format == "sse":
        return event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
    return data
