"""BAGEL's backbone (engine/models/bagel/backbone.py) on the paged engine, fp32, on two
configs: the understanding expert alone against transformers' Qwen3 causal LM; the
generation path (a context written once, then a denoising step's queries that read it
without writing) against the plain reference in backbone_reference.py."""
from __future__ import annotations

import pytest
import torch

from engine.models.bagel import GENERATION, UNDERSTANDING
from tests.engine.bagel.backbone_reference import (SPECS, Packed, backbone_case, latent_embeds, reference_hidden,
                                                   velocity)
from tests.engine.models.mot import feature_step, share_prefix
from tests.engine.models.paged import PagedDriver, greedy

TOL = dict(atol=1e-5, rtol=1e-5)


def hf_reference(state: dict, llm: dict):
    """transformers' Qwen3ForCausalLM with q/k/v/o biases (o_proj's zeroed: Qwen2 has none)
    and the understanding expert's tensors."""
    import transformers as tf

    heads = llm["num_attention_heads"]
    config = tf.Qwen3Config(
        vocab_size=llm["vocab_size"], hidden_size=llm["hidden_size"], intermediate_size=llm["intermediate_size"],
        num_hidden_layers=llm["num_hidden_layers"], num_attention_heads=heads,
        num_key_value_heads=llm["num_key_value_heads"], head_dim=llm["hidden_size"] // heads,
        rope_theta=llm["rope_theta"], rms_norm_eps=llm["rms_norm_eps"], attention_bias=True,
        tie_word_embeddings=False, max_position_embeddings=llm["max_position_embeddings"])
    model = tf.Qwen3ForCausalLM(config).eval()
    own = {name[len("language_model."):]: t for name, t in state.items()
           if name.startswith("language_model.") and "_moe_gen" not in name}
    for name, param in model.named_parameters():
        if name.endswith("o_proj.bias"):
            own[name] = torch.zeros_like(param)
    missing, unexpected = model.load_state_dict(own, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return model


def _prompt(vocab: int, n: int, seed: int) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("case", sorted(SPECS))
def test_the_understanding_expert_alone_is_a_qwen3_causal_lm_with_biases(case):
    model, state, llm = backbone_case(case, seed=1)
    reference = hf_reference(state, llm)
    prompt = _prompt(llm["vocab_size"], 11, seed=2)
    with torch.no_grad():
        ref_logits = reference(torch.tensor([prompt])).logits[0]
        ref_ids = reference.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False,
                                     pad_token_id=0)[0, len(prompt):].tolist()
    driver = PagedDriver(model, block_size=4)
    logits, _ = driver.step([(0, prompt)])
    torch.testing.assert_close(logits, ref_logits, **TOL)
    ids, _ = greedy(PagedDriver(model, block_size=4), prompt, 6, chunk_sizes=[5, 6])
    assert ids == ref_ids


def _text(model, packed: Packed, ids: list[int], start: int) -> int:
    """Text rows (understanding expert, causal), one rope position each; -> next position."""
    packed.add(model.embed(torch.tensor(ids)), [UNDERSTANDING] * len(ids), list(range(start, start + len(ids))), 0)
    return start + len(ids)


def _image(model, packed: Packed, tokens: torch.Tensor, expert: int, position: int, segment: int, markers) -> int:
    """start marker, tokens [n, hidden], end marker: one segment at one position; -> next position."""
    start, end = model.embed(torch.tensor(markers))
    rows = torch.cat([start[None], tokens, end[None]])
    packed.add(rows, [UNDERSTANDING] + [expert] * len(tokens) + [UNDERSTANDING], [position] * len(rows), segment)
    return position + 1


def _run(model, driver, seqs: list[tuple[int, Packed]], writes: list[bool]):
    """One engine step over `seqs` (each its new rows) -> final hidden [T, hidden]."""
    chunks = [(seq, [0] * len(p.experts)) for seq, p in seqs]
    input_ids, _, meta = feature_step(driver, chunks, writes=writes, segments=[p.segments for _, p in seqs])
    embeds = torch.cat([torch.cat(p.embeds) for _, p in seqs])
    experts = torch.tensor([e for _, p in seqs for e in p.experts])
    positions = torch.tensor([pos for _, p in seqs for pos in p.positions])
    hidden, _ = model(input_ids, positions, meta, driver.kv_caches, inputs_embeds=embeds, expert_ids=experts)
    return hidden


def _concat(*parts: Packed) -> Packed:
    out = Packed()
    for p in parts:
        out.embeds += p.embeds
        out.experts += p.experts
        out.positions += p.positions
        out.segments += p.segments
    return out


@pytest.mark.parametrize("case", sorted(SPECS))
def test_a_denoising_step_over_written_contexts_equals_the_plain_reference(case):
    """Context `gen` (sequence 0): a text, a ViT image (understanding expert, one
    bidirectional segment), a clean VAE image (generation expert, t = 0), the prompt text;
    context `cfg_img` (sequence 1): the texts only, at its own positions. Both are written
    in one step. Then one denoising step puts the same noisy latents (t = 0.7) over each
    context, batched, reading without writing; the velocities and the rows written equal
    the reference's, and the pool is left as it was."""
    model, state, llm = backbone_case(case, seed=3)
    grid = model.bagel.defaults.max_latent_size
    vocab, hidden, gen = llm["vocab_size"], llm["hidden_size"], torch.Generator().manual_seed(4)
    markers = (259, 260)  # the tiny tokenizer's <|vision_start|>, <|vision_end|>
    patch_dim = model.bagel.defaults.patch_latent_dim
    system, prompt = [257, *_prompt(vocab, 5, 5), 258], [257, *_prompt(vocab, 4, 6), 258]
    ctx = Packed()
    pos = _text(model, ctx, system, 0)
    pos = _image(model, ctx, torch.randn(6, hidden, generator=gen), UNDERSTANDING, pos, 1, markers)  # ViT, 2x3
    clean = latent_embeds(state, torch.randn(4, patch_dim, generator=gen), 0.0, 2, 2, grid)
    pos = _image(model, ctx, clean, GENERATION, pos, 2, markers)
    gen_pos = _text(model, ctx, prompt, pos)
    ctx_img = Packed()
    img_pos = _text(model, ctx_img, prompt, _text(model, ctx_img, system, 0))

    driver = PagedDriver(model, block_size=4)
    written = _run(model, driver, [(0, ctx), (1, ctx_img)], writes=[True, True])
    torch.testing.assert_close(written[:len(ctx.experts)], reference_hidden(state, llm, ctx), **TOL)
    torch.testing.assert_close(written[len(ctx.experts):], reference_hidden(state, llm, ctx_img), **TOL)

    noisy = torch.randn(6, patch_dim, generator=gen)  # a 2x3 latent grid
    queries = []
    for position in (gen_pos, img_pos):
        q = Packed()
        _image(model, q, model.latent_io.embed(noisy, torch.tensor([0.7]), torch.tensor([0, 1, 2, grid, grid + 1,
                                                                                       grid + 2])),
               GENERATION, position, 3, markers)  # segment ids unique over context + query
        queries.append(q)
    before = [(k.clone(), v.clone()) for k, v in driver.kv_caches]
    out = _run(model, driver, [(0, queries[0]), (1, queries[1])], writes=[False, False])
    for (k, v), (k0, v0) in zip(driver.kv_caches, before):
        assert torch.equal(k.view(torch.int32), k0.view(torch.int32)) and torch.equal(v.view(torch.int32),
                                                                                       v0.view(torch.int32))
    ref_noisy = latent_embeds(state, noisy, 0.7, 2, 3, grid)
    n = len(queries[0].experts)
    for i, (context, query) in enumerate(((ctx, queries[0]), (ctx_img, queries[1]))):
        torch.testing.assert_close(torch.cat(query.embeds)[1:-1], ref_noisy, **TOL)
        ref = reference_hidden(state, llm, _concat(context, query))[-n:]
        v_ref = velocity(state, ref[1:-1])
        torch.testing.assert_close(model.latent_io.velocity(out[i * n + 1:(i + 1) * n - 1]), v_ref, **TOL)


def test_a_context_shared_by_two_branches_is_read_by_both_without_a_copy():
    """cfg-style branches over one cached prefix (the pool's blocks shared, not copied):
    each branch's latents equal the reference over that prefix."""
    model, state, llm = backbone_case("a", seed=5)
    grid, patch_dim = model.bagel.defaults.max_latent_size, model.bagel.defaults.patch_latent_dim
    ctx = Packed()
    pos = _text(model, ctx, [257, 1, 2, 3, 258], 0)
    driver = PagedDriver(model, block_size=4)
    _run(model, driver, [(0, ctx)], writes=[True])
    for branch in (1, 2):
        share_prefix(driver, 0, branch)
    gen = torch.Generator().manual_seed(6)
    queries = []
    for t in (0.9, 0.2):
        q = Packed()
        latents = model.latent_io.embed(torch.randn(4, patch_dim, generator=gen), torch.tensor([t]),
                                        torch.tensor([0, 1, grid, grid + 1]))
        _image(model, q, latents, GENERATION, pos, 1, (259, 260))
        queries.append(q)
    out = _run(model, driver, [(1, queries[0]), (2, queries[1])], writes=[False, False])
    n = len(queries[0].experts)
    for i, q in enumerate(queries):
        ref = reference_hidden(state, llm, _concat(ctx, q))[-n:]
        torch.testing.assert_close(out[i * n:(i + 1) * n], ref, **TOL)


def test_latents_are_patchified_as_upstream_orders_them():
    """A [C, h*p, w*p] latent -> one token per p x p patch, row-major over the patch grid,
    its values ordered (patch row, patch col, channel); unpatchify inverts it."""
    model, _, _ = backbone_case("a")
    io, p, c = model.latent_io, 2, 16
    latent = torch.randn(c, 3 * p, 2 * p, generator=torch.Generator().manual_seed(7))
    tokens = io.patchify(latent)
    assert tokens.shape == (3 * 2, p * p * c)
    for row in range(3):
        for col in range(2):
            patch = latent[:, row * p:(row + 1) * p, col * p:(col + 1) * p]  # [C, p, p]
            assert torch.equal(tokens[row * 2 + col], patch.permute(1, 2, 0).reshape(-1))
    assert torch.equal(io.unpatchify(tokens, 3, 2), latent)
