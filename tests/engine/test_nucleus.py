"""Top-p keeps exactly what transformers' TopPLogitsWarper keeps, on every path: from the top,
on numpy-sorted values, and with torch.sort when ties straddle the threshold; rows flat or
peaked, small or the size of Orpheus' vocabulary, with -inf entries."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import TopPLogitsWarper

from engine.nucleus import MARGIN, nucleus_from_top, top_p_filter, top_p_sorted, top_p_torch_sort


def hf_top_p(row: torch.Tensor, p: float) -> torch.Tensor:
    return TopPLogitsWarper(top_p=p)(None, row[None].clone())[0]


def make_row(vocab: int, scale: float, seed: int, masked: float = 0.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    row = torch.randn(vocab, generator=gen) * scale
    if masked:
        row[torch.rand(vocab, generator=gen) < masked] = float("-inf")
    return row


@settings(max_examples=150, deadline=None, derandomize=True)
@given(vocab=st.sampled_from([2, 7, 50, 1000, 20000]), scale=st.sampled_from([0.01, 0.5, 3.0, 12.0]),
       p=st.sampled_from([1e-6, 0.1, 0.5, 0.8, 0.95, 0.999]), masked=st.sampled_from([0.0, 0.5, 0.99]),
       seed=st.integers(0, 10_000))
def test_every_path_equals_transformers(vocab, scale, p, masked, seed):
    row = make_row(vocab, scale, seed, masked if vocab > 7 else 0.0)
    want = hf_top_p(row, p)
    assert torch.equal(top_p_filter(row, p), want)
    assert torch.equal(top_p_sorted(row, p), want)
    assert torch.equal(top_p_torch_sort(row, p), want)


@pytest.mark.parametrize("scale", [0.3, 2.0, 6.0])
def test_orpheus_sized_rows_equal_transformers(scale):
    for seed in range(3):
        row = make_row(156_940, scale, seed) / 0.6
        assert torch.equal(top_p_filter(row, 0.8), hf_top_p(row, 0.8))


def test_a_peaked_row_is_decided_from_the_top():
    row = make_row(156_940, 6.0, 1)
    kept = nucleus_from_top(row, 0.8)
    assert kept is not None and 1 <= len(kept) < 1000
    assert set(kept.tolist()) == set(torch.isfinite(hf_top_p(row, 0.8)).nonzero().flatten().tolist())


def test_a_flat_row_has_no_floor_and_is_sorted():
    row = make_row(156_940, 0.01, 2)  # every token near 1/V: no floor gathers the mass
    assert nucleus_from_top(row, 0.8) is None
    assert torch.equal(top_p_filter(row, 0.8), hf_top_p(row, 0.8))


def test_a_boundary_within_the_margin_is_left_to_the_sort():
    # probabilities 0.5, 0.3 + d, 0.2 - d: with p = 0.8 the third token's cumulative (0.2 - d) sits
    # at the threshold, closer than the margin
    d = MARGIN / 4
    row = torch.log(torch.tensor([0.5, 0.3 + d, 0.2 - d]))
    assert nucleus_from_top(row, 0.8) is None
    assert torch.equal(top_p_filter(row, 0.8), hf_top_p(row, 0.8))


def test_ties_straddling_the_threshold_follow_torch_sort():
    row = torch.log(torch.tensor([0.4, 0.2, 0.2, 0.2]))  # p = 0.7: one of the tied three is dropped
    assert nucleus_from_top(row, 0.7) is None
    want = hf_top_p(row, 0.7)
    assert torch.isinf(want).sum() == 1
    assert torch.equal(top_p_sorted(row, 0.7), want)
    assert torch.equal(top_p_filter(row, 0.7), want)


def test_the_top_token_is_always_kept():
    row = torch.tensor([10.0, 0.0, -1.0])
    for p in (1e-9, 1e-3):
        out = top_p_filter(row, p)
        assert torch.isfinite(out).tolist() == [True, False, False]
        assert torch.equal(out, hf_top_p(row, p))
    assert top_p_filter(row, 1.0) is row
