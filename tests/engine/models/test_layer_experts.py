"""Per-token layer experts (engine/models/experts.py) against the plain two-expert
reference in tests/engine/models/mot.py, on packed steps over the paged cache."""
from __future__ import annotations

import pytest
import torch

from engine.models import Qwen3ForCausalLM
from engine.models.experts import route_tokens
from tests.engine.models.mot import feature_step, random_model, reference_hidden
from tests.engine.models.paged import PagedDriver

TEXT, LATENT = 0, 1  # BAGEL's understanding and generation experts


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_two_expert_layers_match_the_plain_reference_on_a_packed_batch():
    model = random_model()
    driver = PagedDriver(model, block_size=4)
    experts = {0: [TEXT] * 3 + [LATENT] * 5 + [TEXT] * 2,  # text, an image's latents, text
               1: [LATENT] * 4,                           # one expert only
               2: [TEXT, LATENT, TEXT, LATENT, LATENT]}   # interleaved
    ids = {seq: _ids(len(e), seq) for seq, e in experts.items()}
    chunks = list(ids.items())
    input_ids, positions, meta = feature_step(driver, chunks)
    expert_ids = torch.tensor([e for seq in experts for e in experts[seq]])
    hidden, _ = model(input_ids, positions, meta, driver.kv_caches, expert_ids=expert_ids)
    rows = 0
    for seq, seq_ids in chunks:
        ref = reference_hidden(model, seq_ids, experts[seq], [0] * len(seq_ids))
        torch.testing.assert_close(hidden[rows:rows + len(seq_ids)], ref, atol=2e-5, rtol=2e-5)
        rows += len(seq_ids)


def test_each_expert_writes_the_kv_its_tokens_attend_to_later():
    """A prefill of text then latents (bidirectional segment), then decode steps: the
    cached K/V of each expert's tokens are what later tokens read."""
    model = random_model(seed=1)
    driver = PagedDriver(model, block_size=3)
    prompt, prompt_experts, prompt_segments = _ids(9, 5), [TEXT] * 4 + [LATENT] * 5, [0] * 4 + [1] * 5
    input_ids, positions, meta = feature_step(driver, [(0, prompt)], segments=[prompt_segments])
    model(input_ids, positions, meta, driver.kv_caches, expert_ids=torch.tensor(prompt_experts))
    all_ids, all_experts, all_segments = list(prompt), list(prompt_experts), list(prompt_segments)
    for token, expert in ((7, TEXT), (11, LATENT), (3, TEXT)):
        input_ids, positions, meta = feature_step(driver, [(0, [token])])
        hidden, _ = model(input_ids, positions, meta, driver.kv_caches, expert_ids=torch.tensor([expert]))
        all_ids.append(token), all_experts.append(expert), all_segments.append(0)
        ref = reference_hidden(model, all_ids, all_experts, all_segments)[-1:]
        torch.testing.assert_close(hidden, ref, atol=2e-5, rtol=2e-5)


def test_without_expert_ids_every_token_uses_expert_zero():
    model = random_model(seed=2)
    chunks = [(0, _ids(6, 1)), (1, _ids(3, 2))]
    outs = {}
    for name, expert_ids in (("none", None), ("zeros", torch.zeros(9, dtype=torch.int64)),
                             ("ones", torch.ones(9, dtype=torch.int64))):
        driver = PagedDriver(model)
        input_ids, positions, meta = feature_step(driver, chunks)
        outs[name] = model(input_ids, positions, meta, driver.kv_caches, expert_ids=expert_ids)[0]
    assert torch.equal(outs["none"], outs["zeros"])  # the same path, bit for bit
    assert not torch.allclose(outs["none"], outs["ones"])
    ref = reference_hidden(model, chunks[1][1], [LATENT] * 3, [0] * 3)
    torch.testing.assert_close(outs["ones"][6:], ref, atol=2e-5, rtol=2e-5)  # one expert, its plain path


def test_single_expert_models_keep_their_modules_and_names():
    model = random_model(Qwen3ForCausalLM, attention_bias=False)
    assert model.num_layer_experts == 1 and model.model.layers[0].extra_experts is None
    assert not any("extra_experts" in name for name, _ in model.named_parameters())
    two = random_model()
    names = {name for name, _ in two.named_parameters()}
    assert "model.layers.1.extra_experts.0.self_attn.q_norm.weight" in names
    assert "model.layers.1.extra_experts.0.post_attention_layernorm.weight" in names
    extra = {n for n in names if ".extra_experts." in n}
    assert {n.replace("extra_experts.0.", "") for n in extra} == {
        n for n in names if n.startswith("model.layers.") and n not in extra}  # a full parameter set per layer


def test_route_tokens_checks_ids():
    assert route_tokens(None, 2, 3) is None
    assert route_tokens(torch.zeros(3, dtype=torch.int64), 2, 3) is None
    routed = route_tokens(torch.tensor([1, 0, 1]), 2, 3)
    assert [(e, rows.tolist()) for e, rows in routed.groups] == [(0, [1]), (1, [0, 2])]
    assert routed.single is None and route_tokens(torch.ones(3, dtype=torch.int64), 2, 3).single == 1
    with pytest.raises(ValueError, match="0..1"):
        route_tokens(torch.tensor([0, 2, 1]), 2, 3)
    with pytest.raises(ValueError, match="shape"):
        route_tokens(torch.tensor([0, 1]), 2, 3)
