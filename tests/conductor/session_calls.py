"""What the session tests send and compare: speech-like audio (bench.speech_like: the
silero detector fires on it), the tiny template's framing of a turn written out by hand
(independent of the conductor's own rendering), and a fresh Generate request given a
whole history."""
from __future__ import annotations

import asyncio
import io
import wave

import numpy as np

from bench.speech_like import RATE, pcm16, silence, vowels  # noqa: F401 - the tests' audio
from engine.models.qwen3_omni.tiny import TOKENS, chat_prompt, media_chat_prompt

IM_END, NL = TOKENS["<|im_end|>"], ord("\n")


def wav(pcm: bytes, rate: int = RATE) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(pcm)
    return out.getvalue()


def user_turn(text: str = "", audio: bool = False, after: list[int] | None = None) -> list[int]:
    """The tiny template's ids of one user turn and the generation prompt; after: the
    answer it follows (its closing first: what <|im_end|>\\n it lacks)."""
    ids = media_chat_prompt(text, audio_tokens=(1,)) if audio else chat_prompt(text)
    if after is None:
        return ids
    closing = [NL] if after and after[-1] == IM_END else [IM_END, NL]
    return closing + ids


def fresh(address: str, ids: list[int], clips: list[bytes], params: dict, codes: list | None = None):
    """(text ids, float32 audio) of one Generate request given the whole history as ids,
    its clips (WAV files, in prompt order) as the media inputs; codes: gets its codec
    codes' tensors (the raw output), when given."""
    from client.events import AudioChunk, RawTensor, TextDelta
    from client.generate_call import GenerateCall
    from client.session import ConductorSession
    from core.media_kinds import media_manifest

    inputs = {}
    if clips:
        inputs = {"media": np.frombuffer(b"".join(clips), dtype=np.uint8),
                  "media_parts": np.array(media_manifest([("audio", c) for c in clips]), dtype=np.int64)}

    async def main():
        async with ConductorSession(address) as session:
            call = GenerateCall("omni", input_ids=tuple(ids), inputs=inputs, params=params,
                                output_modalities=("text", "audio"),
                                raw_outputs=("codes",) if codes is not None else ())
            text, audio = [], []
            async for ev in session.generate(call):
                if isinstance(ev, TextDelta):
                    text += ev.token_ids
                elif isinstance(ev, AudioChunk):
                    audio.append(ev.array())
                elif isinstance(ev, RawTensor) and codes is not None:
                    codes.append(ev.value)
            return text, np.concatenate(audio) if audio else np.zeros(0, np.float32)

    return asyncio.run(main())
