"""How a request's `text` or chat `messages` become a walk's input, on the server.

A pipeline names one of these in its ServedModel (`prompt`); the conductor applies it
with the model's own tokenizer (loaded once per model, conductor.tokenizer;
conductor.chat_request calls it). A format has `input_name`, `needs_tokenizer`, and
`ids(tokenizer, messages, params)` (tokenized) or `text(messages)` (UTF-8 bytes):

    ChatTemplate()        messages -> the tokenizer's chat template, the assistant's turn
                          opened -> input_ids [n] (any-width integer ids)
    Utf8Prompt("prompt")  the user turns' text -> UTF-8 bytes, uint8 [n] (text encoders
                          that tokenize inside their service)

messages: [{"role": "system" | "user" | "assistant", "content": str}], at least one.
A format refuses what it cannot apply with InvalidArgument naming the field.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.errors import InvalidArgument


@dataclass(frozen=True)
class ChatTemplate:
    input_name: str = "input_ids"
    needs_tokenizer: bool = True

    def ids(self, tokenizer, messages: list[dict], params: Mapping[str, Any]) -> list[int]:
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidArgument("messages: this model's tokenizer has no chat template; send input_ids")
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return [int(i) for i in ids]


@dataclass(frozen=True)
class Utf8Prompt:
    input_name: str = "prompt"
    needs_tokenizer: bool = False

    def text(self, messages: list[dict]) -> str:
        """The user turns' text; a turn with media parts ([{"type": ...}]) gives its text parts."""
        text = "\n".join(_text_of(m["content"]) for m in messages if m["role"] == "user")
        if not text:
            raise InvalidArgument("messages: no user text (this model reads the user turns as its prompt)")
        return text


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p["text"] for p in content if p["type"] == "text")
