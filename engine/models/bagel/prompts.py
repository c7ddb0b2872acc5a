"""The system prompts BAGEL was trained with for "think" requests, and how a decoded answer
is read (upstream's rules: the text after the first `<|im_start|>`, up to the next
`<|im_start|>` or `<|im_end|>`)."""
from __future__ import annotations

from engine.models.bagel import BOS_TOKEN, EOS_TOKEN

# Model inputs, verbatim: the released weights answer "think" requests in this framing.
VLM_THINK_SYSTEM_PROMPT = (
    "You should first think about the reasoning process in the mind and then provide the user with the answer. \n"
    "The reasoning process is enclosed within <think> </think> tags, i.e. <think> reasoning process here </think> "
    "answer here")
GEN_THINK_SYSTEM_PROMPT = (
    "You should first think about the planning process in the mind and then generate the image. \n"
    "The planning process is enclosed within <think> </think> tags, i.e. <think> planning process here </think> "
    "image here")


def answer_text(decoded: str) -> str:
    """decoded = the tokenizer's text of [im_start, generated ids...]."""
    head = decoded.split(EOS_TOKEN)[0]
    parts = head.split(BOS_TOKEN)
    return parts[1] if len(parts) > 1 else parts[0]


def think_system_prompt(want_image: bool) -> str:
    """The system prompt of a "think" request: planning an image, or reasoning to an answer."""
    return GEN_THINK_SYSTEM_PROMPT if want_image else VLM_THINK_SYSTEM_PROMPT
