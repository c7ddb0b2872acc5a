"""Our models over the paged KV cache vs transformers on tiny random fp32 checkpoints:
greedy ids identical over 32 new tokens, logits allclose (atol 1e-4) at every step, for a
whole-prompt prefill and a prefill in three chunks; captured hidden states match HF's."""
from __future__ import annotations

import pytest
import torch

from engine.models.loader import load_model
from tests.engine.models.cases import PARITY_CASES, TEXT_PARTS, random_prompt
from tests.engine.models.paged import PagedDriver, greedy
from tests.engine.models.reference import hf_greedy, hf_hidden_states

NUM_NEW = 32


@pytest.mark.parametrize("case", list(PARITY_CASES))
def test_greedy_parity_with_transformers(case, tiny_checkpoints):
    family, path = tiny_checkpoints(case)
    prompt = random_prompt(11)
    ref_ids, ref_logits = hf_greedy(path, family, prompt, NUM_NEW)
    model = load_model(path, text_part=TEXT_PARTS.get(family, ""))
    for chunks in ([11], [4, 5, 2]):
        ids, logits = greedy(PagedDriver(model, block_size=4), prompt, NUM_NEW, chunks)
        assert ids == ref_ids, f"{case} chunks={chunks}"
        torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["qwen3", "qwen3_omni_moe"])
def test_captured_hidden_states_follow_hf_indexing(case, tiny_checkpoints):
    family, path = tiny_checkpoints(case)
    prompt = random_prompt(9, seed=3)
    ref = hf_hidden_states(path, family, prompt)
    model = load_model(path, text_part=TEXT_PARTS.get(family, ""))
    assert len(ref) == model.config.num_layers + 1
    for layer in range(model.config.num_layers + 1):
        driver = PagedDriver(model)
        input_ids, positions, meta = driver.metadata([(0, prompt)])
        hidden, captured = model(input_ids, positions, meta, driver.kv_caches, capture_layer=layer)
        torch.testing.assert_close(captured, ref[layer], atol=1e-5, rtol=0)
        torch.testing.assert_close(hidden, ref[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(model.embed(torch.tensor(prompt)), ref[0], atol=0, rtol=0)
    _, none = model(input_ids, positions, meta, driver.kv_caches)
    assert none is None
