"""Sampler: greedy, suppression, and processed logits equal to transformers' own
processors; seeded draws independent of the batch."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from engine.sampler import (Sampler, processed_greedy, processed_logits, repetition_penalty, seeded_generator,
                            top_k_filter, top_p_filter)
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

V = 50


def make(rid="r", prompt=(1, 2, 3), **params) -> Sequence:
    return Sequence(rid, list(prompt), SamplingParams(max_new_tokens=64, **params), 0, 1000, V)


def randn(*shape, seed=0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3


def test_greedy_is_argmax():
    logits = randn(6, V)
    seqs = [make(f"r{i}") for i in range(6)]
    assert Sampler()(logits, seqs) == logits.argmax(-1).tolist()


def test_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match="2 sequences"):
        Sampler()(randn(3, V), [make(), make()])


def test_suppressed_ids_are_never_chosen():
    logits = randn(1, V)
    top = logits[0].topk(3).indices.tolist()
    greedy = make(suppress_token_ids=tuple(top))
    assert Sampler()(logits, [greedy])[0] not in top
    hot = make(suppress_token_ids=tuple(top), temperature=5.0)  # nearly uniform over the rest
    sampler = Sampler(seed=0)
    draws = {sampler(logits, [hot])[0] for _ in range(300)}
    assert not draws & set(top) and len(draws) > 5


@pytest.mark.parametrize("penalty", [0.5, 1.0, 1.3, 2.0])
def test_repetition_penalty_matches_transformers(penalty):
    scores = randn(1, V, seed=1)
    ids = [3, 7, 7, 0, 49, 12, 3]  # repeats, and both ends of the vocab
    hf = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([ids]), scores.clone())
    assert torch.equal(repetition_penalty(scores[0], ids, penalty), hf[0])
    seq = make(prompt=ids[:4], repetition_penalty=penalty)
    for t in ids[4:]:
        seq.append_token(t)  # prompt and output both count
    assert torch.equal(processed_logits(scores[0], seq), hf[0])


@pytest.mark.parametrize("k", [1, 2, 10, V - 1, V, V + 5])
def test_top_k_matches_transformers(k):
    scores = randn(1, V, seed=2)
    scores[0, 5] = scores[0, 6] = scores[0].max() + 1  # a tie at the top
    hf = TopKLogitsWarper(top_k=k)(None, scores.clone())
    assert torch.equal(top_k_filter(scores[0], k), hf[0])


@pytest.mark.parametrize("p", [1e-6, 0.1, 0.5, 0.9, 0.999])
def test_top_p_matches_transformers(p):
    for seed in range(5):
        scores = randn(1, V, seed=seed)
        hf = TopPLogitsWarper(top_p=p)(None, scores.clone())
        ours = top_p_filter(scores[0], p)
        assert torch.equal(ours, hf[0])
        assert torch.isfinite(ours).sum() >= 1  # at least one survives


def test_full_pipeline_matches_transformers_chain():
    scores = randn(1, V, seed=3)
    ids = [1, 2, 3, 9, 9]
    params = dict(repetition_penalty=1.7, temperature=0.7, top_k=12, top_p=0.8)
    seq = make(prompt=ids, **params)
    hf = scores.clone()
    for proc in (RepetitionPenaltyLogitsProcessor(1.7), TemperatureLogitsWarper(0.7),
                 TopKLogitsWarper(12), TopPLogitsWarper(0.8)):
        hf = proc(torch.tensor([ids]), hf)
    assert torch.allclose(processed_logits(scores[0], seq), hf[0])
    assert torch.equal(torch.isinf(processed_logits(scores[0], seq)), torch.isinf(hf[0]))


def test_top_k_one_samples_the_argmax():
    logits = randn(4, V, seed=4)
    seqs = [make(f"r{i}", temperature=1.5, top_k=1) for i in range(4)]
    assert Sampler()(logits, seqs) == logits.argmax(-1).tolist()


def run_seeded(step_logits, others_per_step, row_per_step, process_seed):
    """Samples the seeded request for len(step_logits) steps, with varying batch company."""
    sampler = Sampler(seed=process_seed)
    seq = make("target", temperature=1.0, top_p=0.95, top_k=20, repetition_penalty=1.1, seed=1234)
    out = []
    for t, logits in enumerate(step_logits):
        others = [make(f"o{t}{j}", temperature=1.0, seed=None if j % 2 else j) for j in range(others_per_step[t])]
        batch = others[:]
        row = min(row_per_step[t], len(others))
        batch.insert(row, seq)
        rows = [randn(V, seed=100 + t * 10 + j) for j in range(len(others))]
        rows.insert(row, logits)
        token = sampler(torch.stack(rows), batch)[row]
        seq.append_token(token)
        out.append(token)
    return out


def test_seeded_request_is_independent_of_the_batch():
    step_logits = [randn(V, seed=900 + t) / 3 for t in range(12)]
    alone = run_seeded(step_logits, [0] * 12, [0] * 12, process_seed=1)
    crowded = run_seeded(step_logits, [3, 0, 5, 1, 2, 7, 0, 4, 1, 3, 2, 6], [2, 0, 1, 1, 0, 7, 0, 3, 1, 0, 2, 6],
                         process_seed=99)
    assert alone == crowded
    assert len(set(alone)) > 1  # it really sampled


def test_seeded_generator_is_a_pure_function():
    a = torch.rand(4, generator=seeded_generator(7, 3))
    assert torch.equal(a, torch.rand(4, generator=seeded_generator(7, 3)))
    assert not torch.equal(a, torch.rand(4, generator=seeded_generator(7, 4)))
    assert not torch.equal(a, torch.rand(4, generator=seeded_generator(8, 3)))
    seeded_generator(-1, 0), seeded_generator(2**80, 0)  # any int seed is accepted


def test_unseeded_requests_use_the_process_rng():
    logits = randn(1, V, seed=5) / 3
    draws = lambda sampler: [sampler(logits, [make(temperature=1.0)])[0] for _ in range(20)]  # noqa: E731
    assert draws(Sampler(seed=3)) == draws(Sampler(seed=3))
    assert len(set(draws(Sampler()))) > 1


def test_draw_is_the_one_draw_both_engines_use():
    row = randn(V, seed=6) / 3
    probs = torch.softmax(row, dim=-1)
    # seeded: draw number i comes from the request's own generator, whatever the sampler's RNG
    want = [int(torch.multinomial(probs, 1, generator=seeded_generator(9, i))) for i in range(10)]
    assert [Sampler(seed=i).draw(row, 9, i) for i in range(10)] == want
    # unseeded: the process RNG, advanced by every draw
    rng = torch.Generator().manual_seed(4)
    want = [int(torch.multinomial(probs, 1, generator=rng)) for _ in range(10)]
    sampler = Sampler(seed=4)
    assert [sampler.draw(row, None, 0) for _ in range(10)] == want
    assert len(set(want)) > 1  # it really sampled
    # and a sampled request's token is a draw from its processed logits
    seq = make(temperature=0.7, top_k=10, seed=5)
    assert Sampler()(row[None], [seq]) == [Sampler().draw(processed_logits(row, seq), 5, 0)]


def _reference_logits(row: torch.Tensor, seq: Sequence) -> torch.Tensor:
    """processed_logits written plainly (list indexing, ids re-read every call)."""
    p = seq.params
    temperature = 1.0 if p.greedy else p.temperature
    out = row / temperature if temperature != 1.0 else row.clone()
    seen = seq.token_ids if p.penalize_prompt else seq.output_ids
    if p.repetition_penalty != 1.0 and seen:
        idx = torch.tensor(seen)
        out[idx] = torch.where(row[idx] < 0, row[idx] * p.repetition_penalty, row[idx] / p.repetition_penalty) \
            / temperature
    suppressed = list(p.suppress_token_ids) + (list(p.eos_token_ids) if seq.num_output_tokens < p.min_new_tokens
                                               else [])
    if suppressed:
        out[suppressed] = float("-inf")
    return out if p.greedy else top_p_filter(top_k_filter(out, p.top_k), p.top_p)


@settings(max_examples=80, deadline=None)
@given(suppress=st.lists(st.integers(0, V - 1), max_size=40, unique=True),
       eos=st.lists(st.integers(0, V - 1), max_size=3), min_new=st.integers(0, 4),
       penalty=st.sampled_from([1.0, 1.05, 2.0]), prompt_too=st.booleans(), temperature=st.sampled_from([0.0, 0.7]),
       outputs=st.lists(st.integers(0, V - 1), max_size=6), seed=st.integers(0, 50))
def test_processed_logits_equal_the_plain_computation_at_every_step(suppress, eos, min_new, penalty, prompt_too,
                                                                   temperature, outputs, seed):
    """Cached suppression indices and the growing ids tensor change no bit of any step's logits."""
    seq = Sequence("r", [1, 2, 3], SamplingParams(max_new_tokens=64, suppress_token_ids=tuple(suppress),
                                                   eos_token_ids=tuple(eos), min_new_tokens=min_new,
                                                   repetition_penalty=penalty, penalize_prompt=prompt_too,
                                                   temperature=temperature, top_k=20), 0, 1000, V)
    for step, t in enumerate([*outputs, None]):
        row = randn(V, seed=seed + step)
        assert torch.equal(processed_logits(row, seq), _reference_logits(row, seq))
        if t is None or seq.is_finished:
            break
        seq.append_token(t)


_greedy_seq = st.fixed_dictionaries({
    "suppress": st.sampled_from([(), (0, 7, 9), tuple(range(10, 40))]),
    "eos": st.lists(st.integers(0, V - 1), max_size=2),
    "min_new": st.integers(0, 3), "penalty": st.sampled_from([1.0, 1.05, 2.0]), "prompt_too": st.booleans(),
    "outputs": st.lists(st.integers(0, V - 1), max_size=5)})


@settings(max_examples=60, deadline=None)
@given(specs=st.lists(_greedy_seq, min_size=1, max_size=6), seed=st.integers(0, 50))
def test_greedy_rows_processed_together_equal_each_row_alone(specs, seed):
    """The batch's penalties and suppression in a few writes give every row's own logits bit
    for bit, and the sampler's tokens are their argmaxes, plain greedy rows mixed in."""
    seqs = []
    for i, spec in enumerate(specs):
        seq = Sequence(f"r{i}", [1, 2, 3], SamplingParams(
            max_new_tokens=64, suppress_token_ids=spec["suppress"], eos_token_ids=tuple(spec["eos"]),
            min_new_tokens=spec["min_new"], repetition_penalty=spec["penalty"], penalize_prompt=spec["prompt_too"]),
            0, 1000, V)
        for t in spec["outputs"]:
            if not seq.is_finished:
                seq.append_token(t)
        seqs.append(seq)
    rows = randn(len(seqs), V, seed=seed)
    together = processed_greedy(rows, seqs)
    for r, seq in enumerate(seqs):
        assert torch.equal(together[r], _reference_logits(rows[r], seq)), r
    assert Sampler()(rows, seqs) == [int(_reference_logits(rows[r], s).argmax()) for r, s in enumerate(seqs)]


@pytest.mark.parametrize("name", ["suppress_token_ids", "eos_token_ids", "stop_token_ids"])
def test_id_lists_are_checked_and_become_tuples_of_int(name):
    import numpy as np

    from core.errors import InvalidArgument

    got = getattr(SamplingParams(**{name: [np.int64(7), 3]}), name)
    assert got == (7, 3) and all(type(i) is int for i in got)
    assert getattr(SamplingParams(**{name: range(1000, 2023)}), name) == tuple(range(1000, 2023))
    for bad in ([-1], [5, True], [1.0], ["a"], [np.int64(-2)]):
        with pytest.raises(InvalidArgument, match=f"{name} must be non-negative integers"):
            SamplingParams(**{name: bad})


def test_equal_id_sets_of_different_requests_are_one_object():
    """The sampler groups rows by their id sets' identity: requests built apart (as a talker
    builds each request's params) must still share one object per equal set."""
    a = SamplingParams(suppress_token_ids=tuple(range(1000, 2023)), eos_token_ids=[2023])
    b = SamplingParams(suppress_token_ids=list(range(1000, 2023)), eos_token_ids=(2023,))
    assert a.suppress_token_ids is b.suppress_token_ids and a.eos_token_ids is b.eos_token_ids
    assert SamplingParams(suppress_token_ids=(1, 2)).suppress_token_ids != a.suppress_token_ids
