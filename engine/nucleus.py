"""Top-p (nucleus) filtering that keeps exactly the tokens transformers' TopPLogitsWarper keeps,
without sorting the whole vocabulary on the common path.

transformers sorts a row ascending, takes softmax of the sorted row, cumsums it, drops every
sorted position whose cumulative probability is <= 1 - p and always keeps the last one. The
cumulative sum is non-decreasing, so the dropped positions are a prefix of the sorted row: the
result is a value threshold, and only the top of the row decides it.

Three paths, each giving transformers' result:
- from the top: the few tokens that can matter are the ones above a probability floor whose mass
  already passes p. Their mass from the top gives each one's cumulative probability; when every
  boundary token is further than `MARGIN` from the threshold, float rounding (transformers'
  normalizer is summed in its sorted layout, ours in the row's) cannot move it across, and the
  answer is certain. Rows too flat for a floor, or too close to call, take the next path;
- sorted values: numpy's sort of the values alone (a tenth of torch.sort's cost with its
  indices) feeds the very softmax and cumsum transformers runs, so the threshold is its own;
- torch.sort, when tied values straddle the threshold (which of them transformers drops depends
  on its sort's order of ties).
"""
from __future__ import annotations

import numpy as np
import torch

# The boundary token's cumulative probability must be this far from 1 - p for the top path to
# decide. Float32 rounding of the normalizer moves cumulative probabilities by ~1e-7 relative
# on a 157k-token row; the margin is a hundred times that at the threshold.
MARGIN = 2e-5
# Probability floors tried in turn; a token below the floor is dropped once the mass above it
# passes p by the margin.
FLOORS = (1e-3, 1e-5)


def top_p_filter(row: torch.Tensor, p: float) -> torch.Tensor:
    """row [V] float logits -> row with every token outside the nucleus at -inf (at least one kept)."""
    if p >= 1.0:
        return row
    if row.is_cuda:
        return top_p_torch_sort(row, p)  # a device sort is cheap, and its kernels are transformers' there
    kept = nucleus_from_top(row, p)
    if kept is None:
        return top_p_sorted(row, p)
    out = torch.full_like(row, float("-inf"))
    out[kept] = row[kept]
    return out


def nucleus_from_top(row: torch.Tensor, p: float) -> torch.Tensor | None:
    """The kept token ids ([K], long), or None when this path cannot be sure of them. Index work
    is numpy's: its selection over a boolean row costs a tenth of torch.nonzero's."""
    probs = torch.softmax(row, dim=-1)
    total = float(probs.sum(dtype=torch.float64))
    probs = probs.numpy()  # [V] float32
    threshold = float(np.float32(1 - p))  # transformers compares float32 cumulative sums
    for floor in FLOORS:
        ids = np.flatnonzero(probs >= floor)
        cand = probs[ids].astype(np.float64)
        if float(cand.sum()) - (total - threshold) < MARGIN:
            continue  # tokens below the floor might still be kept
        order = np.argsort(-cand, kind="stable")
        cand = cand[order]
        cumulative = total - (np.cumsum(cand) - cand)  # [K] each one's ascending cumulative probability
        n = max(1, int((cumulative > threshold).sum()))  # kept: a prefix from the top
        if not _clear(cand, cumulative, threshold, n):
            return None
        return torch.from_numpy(ids[order[:n]])
    return None


def _clear(cand: np.ndarray, cumulative: np.ndarray, threshold: float, n: int) -> bool:
    """True when rounding cannot change which of the first n candidates are kept: the last kept and
    the first dropped are far from the threshold and not tied (the first is kept regardless)."""
    if n < len(cand):
        if float(cand[n - 1]) == float(cand[n]) or float(cumulative[n]) > threshold - MARGIN:
            return False
    return n == 1 or float(cumulative[n - 1]) > threshold + MARGIN


def top_p_sorted(row: torch.Tensor, p: float) -> torch.Tensor:
    """transformers' computation on the values sorted by numpy (identical to torch.sort's values)."""
    values = torch.from_numpy(np.sort(row.detach().cpu().numpy()))  # [V] ascending
    cumulative = values.softmax(dim=-1).cumsum(dim=-1)
    dropped = min(int((cumulative <= (1 - p)).sum()), len(values) - 1)
    if dropped == 0:
        return row
    first_kept = values[dropped]
    if bool(values[dropped - 1] == first_kept):
        return top_p_torch_sort(row, p)
    return row.masked_fill(row < first_kept.to(row.device), float("-inf"))


def top_p_torch_sort(row: torch.Tensor, p: float) -> torch.Tensor:
    """transformers' computation itself, ties in torch.sort's order."""
    sorted_logits, order = torch.sort(row, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= (1 - p)
    drop_sorted[..., -1:] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return row.masked_fill(drop, float("-inf"))
