"""A served model's default_params: every request starts from them, its own keys win,
ListModels shows them as the defaults, and a bad default fails when the model is built."""
from __future__ import annotations

import pytest

from conductor.model_info import model_info
from core.errors import InvalidArgument
from pipelines.orpheus.model import orpheus_model, orpheus_placement
from pipelines.orpheus.params import RECOMMENDED


@pytest.fixture(scope="module")
def orpheus():
    return orpheus_model("orpheus", orpheus_placement(["127.0.0.1:1"], ["127.0.0.1:2"]))


def test_a_request_starts_from_the_defaults_and_its_keys_win(orpheus):
    params = orpheus.with_defaults({"temperature": 0.0, "voice": "zoe"})
    assert params == {**RECOMMENDED, "temperature": 0.0, "voice": "zoe"}
    parsed = orpheus.parse_params(orpheus.with_defaults({}))
    assert parsed.text.top_p == RECOMMENDED["top_p"] and list(parsed.text.stop_token_ids) == \
        RECOMMENDED["stop_token_ids"]


def test_list_models_shows_the_served_defaults(orpheus):
    info = model_info(orpheus, has_tokenizer=True)
    defaults = {p.name: p.default_value for p in info.params}
    assert defaults["temperature"].number_value == pytest.approx(RECOMMENDED["temperature"])
    assert defaults["max_new_tokens"].number_value == RECOMMENDED["max_new_tokens"]


def test_a_bad_default_fails_when_the_model_is_built():
    import dataclasses

    good = orpheus_model("orpheus", orpheus_placement(["127.0.0.1:1"], ["127.0.0.1:2"]))
    with pytest.raises(InvalidArgument, match="top_p"):
        dataclasses.replace(good, default_params={"top_p": 7.0})
    with pytest.raises(InvalidArgument, match="loudness"):
        dataclasses.replace(good, default_params={"loudness": 1})
