"""SamplingParams / Sequence validation and the stop rules."""
from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, SequenceStatus
from core.errors import InvalidArgument


def seq(prompt=(1, 2, 3), max_context=64, vocab=128, **params) -> Sequence:
    return Sequence("r", list(prompt), SamplingParams(**params), 0, max_context, vocab)


@pytest.mark.parametrize("kwargs, field", [
    ({"max_new_tokens": 0}, "max_new_tokens must be > 0"),
    ({"max_new_tokens": -3}, "max_new_tokens must be > 0"),
    ({"temperature": -0.1}, "temperature must be 0 (greedy) or in [0.001, 1000]"),
    ({"temperature": math.nan}, "temperature must be 0 (greedy) or in"),
    ({"temperature": 1e-300}, "temperature must be 0 (greedy) or in"),
    ({"temperature": math.inf}, "temperature must be 0 (greedy) or in"),
    ({"repetition_penalty": 1e300}, "repetition_penalty must be in [0.001, 1000]"),
    ({"top_k": -1}, "top_k must be >= 0"),
    ({"top_p": 0.0}, "top_p must be in (0, 1]"),
    ({"top_p": 1.5}, "top_p must be in (0, 1]"),
    ({"repetition_penalty": 0.0}, "repetition_penalty must be in"),
    ({"eos_token_ids": (-1,)}, "eos_token_ids must be non-negative"),
    ({"stop_token_ids": ("a",)}, "stop_token_ids must be non-negative"),
    ({"suppress_token_ids": (2, -5)}, "suppress_token_ids must be non-negative"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"max_new_tokens": 2.0}, "max_new_tokens must be an integer"),
    ({"top_k": True}, "top_k must be an integer"),
    ({"top_p": "0.5"}, "top_p must be a number"),
])
def test_sampling_params_errors_name_the_field(kwargs, field):
    with pytest.raises(InvalidArgument, match=re.escape(field)):
        SamplingParams(**kwargs)


def test_sampling_params_defaults_and_lists_become_tuples():
    p = SamplingParams(eos_token_ids=[5, 6], suppress_token_ids=[1])
    assert p.eos_token_ids == (5, 6) and p.suppress_token_ids == (1,)
    assert p.greedy and p.needs_logit_processing
    assert not SamplingParams().needs_logit_processing
    hash(p)  # frozen and hashable
    with pytest.raises(Exception):
        p.max_new_tokens = 3


@pytest.mark.parametrize("build, message", [
    (lambda: seq(prompt=()), "prompt is empty"),
    (lambda: seq(prompt=(1, 999)), "input id 999 >= vocab size 128"),
    (lambda: seq(prompt=(-1,)), "input id -1 is negative"),
    (lambda: seq(prompt=(1,) * 10, max_context=16, max_new_tokens=7), "past the context length 16"),
    (lambda: seq(suppress_token_ids=(200,)), "suppress_token_ids id 200 >= vocab size 128"),
    (lambda: seq(eos_token_ids=(128,)), "eos_token_ids id 128 >= vocab size 128"),
    (lambda: seq(prompt=(1,), vocab=2, suppress_token_ids=(0, 1)), "suppress_token_ids cover the whole vocabulary"),
])
def test_sequence_validation(build, message):
    with pytest.raises(InvalidArgument, match=message):
        build()


def test_fits_exactly_at_context_length():
    s = seq(prompt=(1,) * 10, max_context=16, max_new_tokens=6)
    for _ in range(6):
        s.append_token(7)
    assert s.finish_reason == "length" and s.num_tokens == 16


def test_derived_state():
    s = seq(prompt=(4, 5, 6))
    assert s.status is SequenceStatus.WAITING and not s.is_finished
    assert (s.num_tokens, s.num_prompt_tokens, s.num_output_tokens, s.last_token_id) == (3, 3, 0, 6)
    s.num_cached_tokens = 2
    assert s.num_uncached_tokens == 1
    s.append_token(9)
    assert s.token_ids == [4, 5, 6, 9] and s.prompt_ids == [4, 5, 6] and s.output_ids == [9]
    assert s.num_uncached_tokens == 2 and s.last_token_id == 9
    # output_ids / prompt_ids are copies: mutating them cannot desynchronise the sequence
    s.output_ids.append(1)
    assert s.num_tokens == 4


@pytest.mark.parametrize("params, tokens, reason, n_out", [
    ({"eos_token_ids": (2,), "max_new_tokens": 8}, [5, 2, 7], "eos", 2),
    ({"stop_token_ids": (9, 10), "max_new_tokens": 8}, [5, 10, 7], "stop", 2),
    ({"max_new_tokens": 3}, [5, 6, 7], "length", 3),
    # eos on the last allowed token is reported as eos
    ({"eos_token_ids": (7,), "max_new_tokens": 3}, [5, 6, 7], "eos", 3),
])
def test_stop_rules(params, tokens, reason, n_out):
    s = seq(**params)
    for t in tokens:
        if s.is_finished:
            break
        s.append_token(t)
    assert s.is_finished and s.status is SequenceStatus.FINISHED
    assert s.finish_reason == reason
    assert s.num_output_tokens == n_out and s.output_ids[-1] == tokens[n_out - 1]  # the stop token is kept


def test_context_rule_guards_the_model_positions():
    # Unreachable for a validated request; a sequence whose budget shrank still stops.
    s = seq(prompt=(1, 2, 3), max_context=10, max_new_tokens=5)
    s.max_context = 5
    s.append_token(4)
    assert not s.is_finished
    s.append_token(4)
    assert s.finish_reason == "context" and s.num_tokens == 5


def test_append_after_finish_or_out_of_vocab_is_a_bug():
    s = seq(max_new_tokens=1)
    with pytest.raises(ValueError, match="vocab"):
        s.append_token(128)
    s.append_token(3)
    with pytest.raises(RuntimeError, match="finished"):
        s.append_token(3)


@settings(max_examples=200, deadline=None)
@given(prompt_len=st.integers(1, 8), max_new=st.integers(1, 8),
       eos=st.sets(st.integers(0, 9), max_size=3), stop=st.sets(st.integers(0, 9), max_size=3),
       stream=st.lists(st.integers(0, 9), min_size=16, max_size=16))
def test_stops_exactly_at_the_first_rule(prompt_len, max_new, eos, stop, stream):
    s = seq(prompt=[1] * prompt_len, max_context=prompt_len + max_new, vocab=10, max_new_tokens=max_new,
            eos_token_ids=tuple(eos), stop_token_ids=tuple(stop))
    fed = 0
    while not s.is_finished:
        s.append_token(stream[fed])
        fed += 1
    first = next((i for i, t in enumerate(stream[:max_new]) if t in eos or t in stop), None)
    if first is None:
        assert s.finish_reason == "length" and fed == max_new
    else:
        assert fed == first + 1
        assert s.finish_reason == ("eos" if stream[first] in eos else "stop")
    assert s.output_ids == stream[:fed]


@settings(max_examples=60, deadline=None)
@given(prompt=st.lists(st.integers(0, 127), min_size=1, max_size=8),
       appends=st.lists(st.lists(st.integers(0, 127), max_size=5), max_size=6))
def test_ids_tensor_follows_every_append(prompt, appends):
    """The cached ids tensor, read between any appends, is token_ids (and output_ids) as a tensor."""
    import torch

    s = seq(prompt=prompt, max_context=1000, max_new_tokens=500)
    for batch in appends:
        for t in batch:
            s.append_token(t)
        assert s.ids_tensor().tolist() == s.token_ids and s.ids_tensor().dtype == torch.long
        assert s.ids_tensor(with_prompt=False).tolist() == s.output_ids
