"""The thinker reads a request's sampling keys with engine.sampling_params.TextParams: a
bad value is INVALID_ARGUMENT naming the key (top_k="x" used to fail as INTERNAL), and
the graph's stop ids join the request's."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from runtime.items import OpenNode, StopRule
from services.thinker.component import ThinkerComponent


class RecordingEngine:
    def __init__(self) -> None:
        self.added = []

    def add_request(self, request_id, prompt, params) -> None:
        self.added.append((request_id, prompt, params))


def _open(params: dict, stop: StopRule = StopRule()) -> tuple[ThinkerComponent, RecordingEngine]:
    engine = RecordingEngine()
    thinker = ThinkerComponent(engine, eos_token_ids=(2,))
    thinker.open(OpenNode("r", "prefill", params=params, stop_rule=stop), {"input_ids": torch.tensor([1, 5])})
    return thinker, engine


@pytest.mark.parametrize("params, words", [
    ({"top_k": "x"}, "params.top_k must be an integer, got 'x'"),
    ({"temperature": -1.0}, "params.temperature must be >= 0"),
    ({"suppress_token_ids": ["a"]}, "params.suppress_token_ids must be a list"),
    ({"max_new_tokens": True}, "params.max_new_tokens must be an integer"),
])
def test_a_bad_sampling_param_is_invalid_argument_naming_the_key(params, words):
    with pytest.raises(InvalidArgument) as e:
        _open(params)
    assert words in str(e.value)


def test_the_request_params_and_the_graph_stop_ids_reach_the_engine():
    _, engine = _open({"max_new_tokens": 5.0, "temperature": 0.5, "stop_token_ids": [7.0], "tags": "ignored"},
                      StopRule(stop_token_ids=(9,)))
    (_, prompt, params), = engine.added
    assert prompt == [1, 5] and params.max_new_tokens == 5 and params.temperature == 0.5
    assert params.stop_token_ids == (9, 7) and params.eos_token_ids == (2,)
