"""The talker's length fits its context: a bound the request did not set is clamped to
what the context holds after the prompt, and a max_frames (min_frames) the request set
past it is refused naming the field; the prompt length it counts with is the engine's."""
from __future__ import annotations

import pytest
import torch

from core.errors import InvalidArgument
from engine.llm_engine import EngineConfig, LLMEngine
from engine.models.qwen3_omni import THINKER_PART
from engine.models.qwen3_omni.params import DEFAULT_MAX_FRAMES, TalkerParams
from engine.models.qwen3_omni.tiny import chat_prompt
from engine.sampling_params import SamplingParams
from runtime.items import OpenNode, StreamInput
from services.qwen3_omni.talker import TalkerComponent, talker_prompt_len

pytestmark = pytest.mark.timeout(180)


def test_a_default_bound_is_clamped_to_the_room_and_a_set_one_is_refused():
    assert TalkerParams().sampling_kwargs(4096, room=2023)["max_new_tokens"] == 2023
    assert TalkerParams().sampling_kwargs(0, room=5000)["max_new_tokens"] == DEFAULT_MAX_FRAMES
    assert TalkerParams(max_frames=100).sampling_kwargs(4096, room=2023)["max_new_tokens"] == 100
    assert TalkerParams().sampling_kwargs(4096)["max_new_tokens"] == 4096  # room unknown: as before
    for params in (TalkerParams(max_frames=3000), TalkerParams(max_frames=5000)):  # the loop's 4096 caps 5000
        with pytest.raises(InvalidArgument, match=r"^params\.max_frames is \d+, .* at most 2023 frames"):
            params.sampling_kwargs(4096, room=2023)
    with pytest.raises(InvalidArgument, match=r"^params\.min_frames is 3000"):
        TalkerParams(min_frames=3000).sampling_kwargs(4096, room=2023)
    # a prompt that fills the context alone: one frame, which the engine refuses as the prompt's fault
    for room in (0, -3):
        kwargs = TalkerParams(max_frames=50, min_frames=5).sampling_kwargs(4096, room=room)
        assert (kwargs["max_new_tokens"], kwargs["min_new_tokens"]) == (1, 0)


@pytest.fixture(scope="module")
def parts(tiny_omni):
    talker = TalkerComponent.from_checkpoint(str(tiny_omni))
    thinker = LLMEngine.from_checkpoint(EngineConfig(checkpoint=str(tiny_omni), text_part=THINKER_PART,
                                                     capture_layer=1, return_embeddings=True))
    yield talker, thinker
    talker.close()


def _rows(thinker: LLMEngine, rid: str, prompt: list[int]) -> list[torch.Tensor]:
    thinker.add_request(rid, prompt, SamplingParams(max_new_tokens=4, eos_token_ids=thinker.model.config.eos_token_ids))
    rows = []
    while thinker.has_work():
        rows += [o.embeds for o in thinker.step()]
    return rows


def _open(talker: TalkerComponent, rid: str, prompt: list[int], first: torch.Tensor, **params) -> None:
    item = OpenNode(request_id=rid, node="talker", iteration=(0,), inputs={}, params=params,
                    max_iters=4096, stream=StreamInput("thinker", continue_after_producer_done=True))
    talker.open(item, {"prompt_ids": torch.tensor(prompt), "prompt_embeds": first})


def test_the_default_fits_the_context_the_engine_gives(parts):
    talker, thinker = parts
    prompt = chat_prompt("Hello there")
    rows = _rows(thinker, "fits", prompt)
    _open(talker, "fits", prompt, rows[0])
    for row in rows[1:]:
        talker.push(_Push("fits"), {"embeds": row})
    seq = talker.engine.requests["fits"].seq
    assert seq is not None, "the talker never started"
    assert len(seq.prompt_ids) == talker_prompt_len(prompt, talker.engine.spec.tokens)
    assert len(seq.prompt_ids) + seq.params.max_new_tokens == talker.engine.max_context
    talker.cancel("fits")


def test_a_max_frames_past_the_context_is_refused_naming_it(parts):
    talker, thinker = parts
    prompt = chat_prompt("Hello there")
    rows = _rows(thinker, "past", prompt)
    room = talker.engine.max_context - talker_prompt_len(prompt, talker.engine.spec.tokens)
    with pytest.raises(InvalidArgument, match=rf"^params\.max_frames is {room + 1}, .* at most {room} frames"):
        _open(talker, "past", prompt, rows[0], max_frames=room + 1)
    assert "past" not in talker.engine.requests and "past" not in talker.runs


class _Push:
    """What the talker reads of a streamed push."""

    def __init__(self, request_id: str) -> None:
        self.request_id, self.port, self.end_of_stream = request_id, "embeds", False
