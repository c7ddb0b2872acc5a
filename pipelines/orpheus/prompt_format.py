"""Orpheus reads a text request as "{voice}: {text}" inside its speech prompt
(engine.models.orpheus.prompt), tokenized by the checkpoint's tokenizer on the server."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.errors import InvalidArgument
from engine.models.orpheus import BEGIN_OF_TEXT
from engine.models.orpheus.prompt import prompt_ids, voice_text


@dataclass(frozen=True)
class OrpheusPrompt:
    input_name: str = "input_ids"
    needs_tokenizer: bool = True

    def ids(self, tokenizer, messages: list[dict], params: Mapping[str, Any]) -> list[int]:
        text = "\n".join(m["content"] for m in messages if m["role"] == "user")
        if not text:
            raise InvalidArgument("messages: no user text to speak")
        ids = list(tokenizer(voice_text(text, str(params.get("voice") or "tara").lower()))["input_ids"])
        if not ids or ids[0] != BEGIN_OF_TEXT:  # a tokenizer without the begin-of-text post-processor
            ids = [BEGIN_OF_TEXT, *ids]
        return prompt_ids(ids)
