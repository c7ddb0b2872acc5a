"""The Orpheus prompt: start-of-human, the tokenizer's encoding of "{voice}: {text}"
(with its begin-of-text id), then end-of-text, end-of-human, start-of-AI and
start-of-speech. The model answers with audio tokens until END_OF_SPEECH."""
from __future__ import annotations

from core.errors import InvalidArgument
from engine.models.orpheus import (BEGIN_OF_TEXT, END_OF_HUMAN, END_OF_TEXT, START_OF_AI, START_OF_HUMAN,
                                   START_OF_SPEECH, VOICES)

PROMPT_END = (END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH)


def prompt_ids(text_ids: list[int]) -> list[int]:
    """The prompt around `text_ids`, the tokenizer's ids of "{voice}: {text}" (begin-of-text first)."""
    if not text_ids:
        raise InvalidArgument("text_ids: empty (the encoding of '{voice}: {text}')")
    return [START_OF_HUMAN, *text_ids, *PROMPT_END]


def voice_text(text: str, voice: str) -> str:
    """What the tokenizer reads; InvalidArgument naming `voice` or `text`."""
    if not text:
        raise InvalidArgument("text: empty")
    if voice not in VOICES:
        raise InvalidArgument(f"voice {voice!r} is not one of {list(VOICES)}")
    return f"{voice}: {text}"


def speech_prompt_ids(tokenizer_dir: str, text: str, voice: str = "tara") -> list[int]:
    """Tokenizes with the checkpoint's own tokenizer (never a hub download)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    if not Path(tokenizer_dir).is_dir():
        raise InvalidArgument(f"tokenizer {tokenizer_dir} is not a directory")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"no tokenizer in {tokenizer_dir}: {str(e).splitlines()[0]}") from None
    ids = tokenizer(voice_text(text, voice))["input_ids"]
    if not ids or ids[0] != BEGIN_OF_TEXT:  # a tokenizer without the begin-of-text post-processor
        ids = [BEGIN_OF_TEXT, *ids]
    return prompt_ids(list(ids))
