"""A user's text as the prompt ids a speech request takes, tokenized by the checkpoint's
own tokenizer (the ids of one checkpoint mean nothing to another)."""
from __future__ import annotations

from pathlib import Path

from core.errors import InvalidArgument

# Qwen's chat format, for a tokenizer without a chat template (the tiny checkpoints'):
# the user turn, then the assistant's turn opened for the model to continue.
CHATML = "<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def chat_prompt_ids(tokenizer_dir: str, text: str, voice: str | None = None) -> list[int]:
    """`text` as one user turn with the assistant's turn opened: the tokenizer's chat
    template when it has one, else CHATML. InvalidArgument when `tokenizer_dir` holds no
    tokenizer, `text` is empty, or a voice is asked of the prompt (a chat's voice, where
    a model has one, is a request param, not part of its prompt)."""
    if voice is not None:
        raise InvalidArgument(f"voice {voice!r}: a chat prompt takes no voice")
    from transformers import AutoTokenizer

    if not text:
        raise InvalidArgument("text is empty")
    if not Path(tokenizer_dir).is_dir():  # never a hub id: nothing is downloaded here
        raise InvalidArgument(f"tokenizer {tokenizer_dir} is not a directory")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except (OSError, ValueError) as e:
        first_line = (str(e).splitlines() or [type(e).__name__])[0]
        raise InvalidArgument(f"no tokenizer in {tokenizer_dir}: {first_line}") from None
    if tokenizer.chat_template:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
    else:
        ids = tokenizer.encode(CHATML.format(text=text), add_special_tokens=False)
    return [int(i) for i in ids]
