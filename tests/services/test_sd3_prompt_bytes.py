"""The SD3 text service bounds a prompt by its bytes before it decodes or tokenizes it
(services/sd3/text.py): tokenizing costs ~3 s a MiB on the engine thread every request
there shares, and the encoders keep at most 77 CLIP and 512 T5 tokens anyway."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.models.sd3.params import MAX_PROMPT_BYTES
from services.sd3.text import check_prompt_bytes, prompt_text


def _utf8(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(text.encode()), dtype=torch.uint8)


def test_a_prompt_at_the_bound_is_read():
    text = "a red fox " * (MAX_PROMPT_BYTES // 10)
    assert prompt_text({"prompt": _utf8(text)}, "clip_l") == text


def test_a_prompt_past_the_bound_is_refused_by_its_bytes():
    with pytest.raises(InvalidArgument) as e:
        prompt_text({"prompt": torch.full((MAX_PROMPT_BYTES + 1,), 0xFF, dtype=torch.uint8)}, "t5")
    message = str(e.value)  # refused by size: the bytes (not UTF-8) were never decoded
    assert message.startswith(f"open.inputs[prompt] is {MAX_PROMPT_BYTES + 1} bytes"), message
    assert f"limit of {MAX_PROMPT_BYTES}" in message


def test_a_negative_prompt_is_bounded_the_same_way():
    check_prompt_bytes("params.negative_prompt", MAX_PROMPT_BYTES)
    with pytest.raises(InvalidArgument, match=f"params.negative_prompt is {MAX_PROMPT_BYTES + 1} bytes"):
        check_prompt_bytes("params.negative_prompt", MAX_PROMPT_BYTES + 1)
