"""How a session's turns become prompt ids with the model's own chat template, so that a
conversation continued turn by turn is, id for id, the conversation rendered whole.

The thinker's kept context ends right after the last assistant answer's generated ids
(the end-of-turn id included when the model sent it). What comes after it is rendered
from the template's own text, cut out of renders of a short stand-in history:

    closing    what the template writes after an assistant's content ("<|im_end|>\\n"):
               its part the answer does not already end with is sent first;
    message    one system/user message as it follows an assistant message, its own
               closing included; an audio part is the template's placeholder (the
               conductor's media walk widens it to the clip's rows);
    opening    the generation prompt ("<|im_start|>assistant\\n").

The first turn (no context) is the template applied to its messages as they stand (a
template may add a default system turn there).

    framing = ChatFraming(tokenizer)
    ids = framing.first([Message("user", ("Hi",))]) + framing.opening
    ids = framing.closing(answer_ids) + framing.message(Message("user", (AUDIO,))) + framing.opening
"""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import InvalidArgument

AUDIO = object()  # an audio part's place in a message (its bytes travel beside the ids)
_STAND_IN = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "\u2063"}]


@dataclass(frozen=True)
class Message:
    """One message to render: role and parts (text, or AUDIO for a clip)."""
    role: str
    parts: tuple


class ChatFraming:
    def __init__(self, tokenizer) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidArgument("configure.model: this model's tokenizer has no chat template (a session needs it)")
        self.tokenizer = tokenizer
        history = self._render(_STAND_IN, False)
        marker = history.rindex(_STAND_IN[1]["content"])
        self._history = history
        self.close_ids = self._ids(history[marker + len(_STAND_IN[1]["content"]):])
        self.opening = self._ids(self._render(_STAND_IN, True)[len(history):])

    def _render(self, messages: list[dict], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=False)

    def _ids(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def first(self, messages: list[Message]) -> list[int]:
        """The ids of a conversation's opening messages, rendered as they stand."""
        return self._ids(self._render([_as_dict(m) for m in messages], False)) if messages else []

    def message(self, message: Message) -> list[int]:
        """One message's ids as it follows an assistant message (its closing included)."""
        text = self._render([*_STAND_IN, _as_dict(message)], False)
        if not text.startswith(self._history):
            raise InvalidArgument(f"the chat template does not render a {message.role} message after an answer "
                                  "as an append (a session cannot continue it)")
        return self._ids(text[len(self._history):])

    def closing(self, answer_ids: list[int]) -> list[int]:
        """What closes an answer: the template's closing less the part the answer ends with
        (an answer that stopped on the end-of-turn id needs only what follows it)."""
        close = self.close_ids
        for n in range(min(len(close), len(answer_ids)), 0, -1):
            if list(answer_ids[-n:]) == close[:n]:
                return close[n:]
        return list(close)


def _as_dict(m: Message) -> dict:
    if all(isinstance(p, str) for p in m.parts):
        return {"role": m.role, "content": "".join(m.parts)}
    return {"role": m.role, "content": [{"type": "audio"} if p is AUDIO else {"type": "text", "text": p}
                                        for p in m.parts]}
