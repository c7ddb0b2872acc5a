"""A user's text becomes prompt ids through the checkpoint's own tokenizer: its chat
template when it has one, else Qwen's chat format; both give the tiny checkpoint's ids."""
from __future__ import annotations

import pytest

from core.errors import InvalidArgument
from engine.models.qwen3_omni.tiny import chat_prompt, write_omni_tokenizer
from pipelines.chat_prompt import chat_prompt_ids

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    from transformers import AutoTokenizer

    plain = tmp_path_factory.mktemp("plain")
    write_omni_tokenizer(plain)
    templated = tmp_path_factory.mktemp("templated")
    tok = AutoTokenizer.from_pretrained(str(plain))
    tok.chat_template = TEMPLATE
    tok.save_pretrained(str(templated))
    return plain, templated


@pytest.mark.parametrize("text", ["Hello there", "héllo, wörld"])
def test_both_paths_give_the_chat_prompt_ids(tokenizers, text):
    for directory in tokenizers:
        assert chat_prompt_ids(str(directory), text) == chat_prompt(text)


def test_no_tokenizer_or_no_text_is_invalid_argument(tokenizers, tmp_path):
    with pytest.raises(InvalidArgument, match="is not a directory"):
        chat_prompt_ids(str(tmp_path / "missing"), "hi")
    with pytest.raises(InvalidArgument, match="no tokenizer in"):
        chat_prompt_ids(str(tmp_path), "hi")
    with pytest.raises(InvalidArgument, match="text is empty"):
        chat_prompt_ids(str(tokenizers[0]), "")
