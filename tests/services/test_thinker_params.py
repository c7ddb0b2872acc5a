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

    def add_request(self, request_id, prompt, params, media=None, context=None) -> None:
        assert media is None and context is None  # a text prompt, no kept context
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


def test_the_decode_loops_stop_ids_end_generation(tmp_path):
    """The stop ids of the decode loop arrive with its open, after prefill: they end the
    request from the next token on (the stop id of a loop, not only the checkpoint's eos)."""
    from engine.checkpoints.tiny_text import make_tiny

    checkpoint = str(make_tiny("qwen3", tmp_path / "ckpt", num_hidden_layers=1))

    def decode_tokens(stop: tuple[int, ...]) -> list[int]:
        thinker = ThinkerComponent.from_checkpoint(checkpoint, num_blocks=16)
        params = {"max_new_tokens": 12.0, "ignore_eos": True}
        thinker.open(OpenNode("r", "prefill", params=params), {"input_ids": torch.tensor([3, 1, 4, 1, 5])})
        tokens, done = [], False
        while not done:
            for ev in thinker.step():
                if ev.node == "prefill" and type(ev).__name__ == "NodeDone":
                    thinker.open(OpenNode("r", "decode", stop_rule=StopRule(stop_token_ids=stop)), {})
                elif ev.node == "decode" and type(ev).__name__ == "NodeOutput":
                    tokens.append(int(ev.tensors["token"]))
                done = done or (ev.node == "decode" and type(ev).__name__ == "NodeDone")
        thinker.close()
        return tokens

    free = decode_tokens(())
    assert len(free) == 11  # the first of 12 tokens is prefill's
    stop_at = next(i for i, t in enumerate(free) if t not in free[:i] and i >= 2)
    assert decode_tokens((free[stop_at],)) == free[:stop_at + 1]
