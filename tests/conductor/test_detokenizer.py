"""Incremental detokenization: the deltas never split a UTF-8 character and together
equal a full decode of the same ids, for multi-byte text and for arbitrary ids
(a random model emits stray continuation bytes and special tokens)."""
from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conductor.detokenizer import REPLACEMENT, IncrementalDetokenizer
from engine.models.qwen3_omni.tiny import SPECIAL, THINKER_VOCAB, write_omni_tokenizer

_TOKENIZER = []


@pytest.fixture(scope="module", autouse=True)
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("tok")
    write_omni_tokenizer(directory)
    _TOKENIZER[:] = [AutoTokenizer.from_pretrained(str(directory), local_files_only=True)]
    return _TOKENIZER[0]


def _deltas(ids: list[int], cuts: list[int]) -> list[str]:
    detok = IncrementalDetokenizer(_TOKENIZER[0])
    bounds = sorted({0, len(ids), *(c % (len(ids) + 1) for c in cuts)})
    out = [detok.push(ids[a:b]) for a, b in zip(bounds, bounds[1:])]
    return out + [detok.finish()]


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x1FAFF, exclude_categories=("Cs",)),
               max_size=24),
       st.lists(st.integers(min_value=0, max_value=200), max_size=30))
def test_deltas_of_multibyte_text_equal_the_full_decode(text, cuts):
    # A special token's literal ("user", "<|im_end|>") encodes to its special id, which
    # decoding skips: such text is the next test's case, not this round trip's.
    assume(not any(literal in text for literal in SPECIAL))
    ids = _TOKENIZER[0].encode(text, add_special_tokens=False)
    deltas = _deltas(ids, cuts)
    assert "".join(deltas) == _TOKENIZER[0].decode(ids, skip_special_tokens=True) == text
    assert not any(REPLACEMENT in d for d in deltas), "a delta split a character"


@pytest.mark.parametrize("text", ["<|im_end|>", "a user says <|im_start|>hi", "système"])
def test_special_literals_in_text_are_dropped_as_a_full_decode_drops_them(text):
    ids = _TOKENIZER[0].encode(text, add_special_tokens=False)
    expected = _TOKENIZER[0].decode(ids, skip_special_tokens=True)
    assert "".join(_deltas(ids, [1, 2, 3])) == expected
    assert not any(literal in expected for literal in ("<|im_end|>", "<|im_start|>", "user"))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=THINKER_VOCAB - 1), max_size=40),
       st.lists(st.integers(min_value=0, max_value=200), max_size=30))
def test_deltas_of_any_ids_equal_the_full_decode(ids, cuts):
    assert "".join(_deltas(ids, cuts)) == _TOKENIZER[0].decode(ids, skip_special_tokens=True)


def test_a_character_is_held_back_until_its_last_byte():
    detok = IncrementalDetokenizer(_TOKENIZER[0])
    emoji = list("🦊".encode())  # 4 byte ids
    assert [detok.push([b]) for b in emoji] == ["", "", "", "🦊"]
    assert detok.push([ord("a")]) == "a" and detok.finish() == ""
