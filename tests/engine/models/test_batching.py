"""Sequences batched in one forward get the logits each gets alone (prefill+prefill,
decode+decode, and a prefill chunk mixed with decodes)."""
from __future__ import annotations

import pytest
import torch

from engine.models.loader import load_model
from tests.engine.models.cases import random_prompt
from tests.engine.models.paged import PagedDriver


def _alone(model, prompt: list[int], decode_ids: list[int]) -> list[torch.Tensor]:
    """Last-row logits after the prompt, then after each decode token, for one sequence."""
    driver = PagedDriver(model, seed=5)
    out = [driver.step([(0, prompt)])[0][-1]]
    for token in decode_ids:
        out.append(driver.step([(0, [token])])[0][-1])
    return out


@pytest.mark.parametrize("case", ["qwen3", "qwen3_moe", "llama"])
def test_two_sequences_batched_match_each_alone(case, tiny_checkpoints):
    _, path = tiny_checkpoints(case)
    model = load_model(path)
    a, b = random_prompt(13, seed=7), random_prompt(6, seed=8)
    decode_a, decode_b = [5, 9, 200, 17, 3], [44, 1, 90, 91, 250]
    solo_a, solo_b = _alone(model, a, decode_a), _alone(model, b, decode_b)

    driver = PagedDriver(model, seed=9)
    chunks = [(0, a), (1, b)]
    logits, _ = driver.step(chunks)
    rows = driver.last_rows(chunks)
    torch.testing.assert_close(logits[rows[0]], solo_a[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[rows[1]], solo_b[0], atol=1e-5, rtol=0)
    for step, (ta, tb) in enumerate(zip(decode_a, decode_b), start=1):
        logits, _ = driver.step([(1, [tb]), (0, [ta])])  # order differs from the prefill's
        torch.testing.assert_close(logits[0], solo_b[step], atol=1e-5, rtol=0)
        torch.testing.assert_close(logits[1], solo_a[step], atol=1e-5, rtol=0)


def test_prefill_chunk_mixed_with_decodes(tiny_checkpoints):
    _, path = tiny_checkpoints("qwen3_moe")
    model = load_model(path)
    a, b, c = random_prompt(9, seed=1), random_prompt(10, seed=2), random_prompt(7, seed=3)
    solo_a, solo_b, solo_c = _alone(model, a, [11]), _alone(model, b, [12]), _alone(model, c, [])

    driver = PagedDriver(model, seed=4)
    driver.step([(0, a)])
    driver.step([(1, b[:6])])
    chunks = [(0, [11]), (1, b[6:]), (2, c)]  # decode, last prefill chunk, whole prefill
    logits, _ = driver.step(chunks)
    rows = driver.last_rows(chunks)
    torch.testing.assert_close(logits[rows[0]], solo_a[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[rows[1]], solo_b[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[rows[2]], solo_c[0], atol=1e-5, rtol=0)
    logits, _ = driver.step([(1, [12])])
    torch.testing.assert_close(logits[0], solo_b[1], atol=1e-5, rtol=0)
