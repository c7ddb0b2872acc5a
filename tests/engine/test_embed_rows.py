"""EmbedRows, the growing row buffer of sequences fed embeddings and of the talker's
thinker rows: whatever the chunking, its rows are the concatenation of what went in."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InvalidArgument
from engine.embed_rows import EmbedRows
from engine.sampling_params import SamplingParams
from engine.models.qwen3_omni.talker_request import HEAD_ROWS, TalkerRequest

TOKENS = {"im_start_token_id": 1, "assistant_token_id": 2}


def _chunks(sizes: list[int], width: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, width, generator=g) for n in sizes]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=12), width=st.integers(1, 6),
       one_by_one=st.booleans(), seed=st.integers(0, 99))
def test_rows_are_the_concatenation_of_what_went_in(sizes, width, one_by_one, seed):
    chunks = _chunks(sizes, width, seed)
    whole = torch.cat(chunks)
    buf = EmbedRows(chunks[0])
    for chunk in chunks[1:]:
        if one_by_one:
            for row in chunk:
                buf.append(row)
        else:
            buf.extend(chunk)
    assert len(buf) == whole.shape[0]
    for start in range(0, len(buf) + 1, 3):
        for end in range(start, len(buf) + 1, 2):
            assert torch.equal(buf.rows(start, end), whole[start:end])


def test_rows_are_copies_and_bounds_are_checked():
    source = torch.ones(2, 3)
    buf = EmbedRows(source)
    more = torch.full((4, 3), 2.0)
    buf.extend(more)
    source.zero_()  # the caller's tensors may be reused (or be read-only message buffers)
    more.zero_()
    assert torch.equal(buf.rows(0, 6), torch.tensor([[1.0] * 3] * 2 + [[2.0] * 3] * 4))
    with pytest.raises(IndexError, match="rows 5:7 outside 0:6"):
        buf.rows(5, 7)
    with pytest.raises(ValueError, match="width 3"):
        buf.extend(torch.ones(1, 4))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 5), min_size=1, max_size=10), seed=st.integers(0, 99))
def test_a_talker_request_reads_the_thinker_rows_it_was_sent(sizes, seed):
    prompt = [5, 1, 2, 7]  # <|im_start|> assistant at 1
    req = TalkerRequest("r", prompt, SamplingParams(max_new_tokens=4), 0, TOKENS)
    embeds, hidden = _chunks(sizes, 4, seed), _chunks(sizes, 4, seed + 1)
    for e, h in zip(embeds, hidden):
        req.add_rows(e, h)
    total = sum(sizes)
    assert req.num_rows == total and req.can_start == (total >= 1 + HEAD_ROWS)
    if total:
        assert torch.equal(req.rows(0, total), torch.cat(embeds))
        assert torch.equal(req.rows(0, total, hidden=True), torch.cat(hidden))
    with pytest.raises(InvalidArgument, match="hidden states"):
        req.rows(0, total + 1, hidden=True)
