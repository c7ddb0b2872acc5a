"""A session turn's events are made as plain data (conductor.session_generate.TurnEvents)
by the same RequestEvents that makes a Generate call's messages: for the same walk
outputs, each turn event carries what the GenerateEvent carries, field by field."""
from __future__ import annotations

import torch

from conductor.client_events import GenerateEvents, RequestEvents, WantedOutputs
from conductor.session_generate import TurnEvents
from conductor.session_turns import TurnAudio, TurnRaw, TurnText
from core.session_events import Usage
from tests.conductor.test_client_events import setup  # noqa: F401 - the tiny Qwen3-Omni's model and tokenizer

WANTED = WantedOutputs(frozenset({"text", "audio"}), frozenset({"codes"}))


def _events(setup, form) -> list:
    model, outputs, tokenizer = setup
    events = RequestEvents(model, outputs, "r", tokenizer, WANTED, t0=0.0, prompt_tokens=5, form=form)
    events.report = {"prompt_tokens": 9, "cached_prompt_tokens": 4, "context_id": "ctx_1"}
    fox = list("🦊".encode())
    stream = [("first_token", torch.tensor([fox[0]])), ("codes", torch.tensor([[1, 2], [3, 4]])),
              ("audio", torch.linspace(-1, 1, 480)), ("token", torch.tensor(fox[1:3])),
              ("audio", torch.full((240,), 0.5)), ("token", torch.tensor([fox[3], 257]))]
    out = [ev for i, (name, value) in enumerate(stream) for ev in events.of(name, value, now=0.1 * (i + 1))]
    return out + events.end(now=1.0)


def _as_plain(ev):
    """A GenerateEvent as the turn event it stands for."""
    kind = ev.WhichOneof("kind")
    if kind == "text":
        return TurnText(tuple(ev.text.token_ids), ev.text.text)
    if kind == "audio":
        a = ev.audio
        return TurnAudio(a.samples, a.sample_rate, a.sequence_number, a.num_samples)
    if kind == "tensor":
        return TurnRaw(ev.tensor)
    u = ev.usage
    return Usage(u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens, u.audio_seconds,
                 u.time_to_first_audio_ms, u.context_id)


def test_a_turns_events_are_the_generate_events_in_plain_data(setup):  # noqa: F811
    turn, messages = _events(setup, TurnEvents), _events(setup, GenerateEvents)
    assert [type(e) for e in turn] == [TurnText, TurnRaw, TurnAudio, TurnText, TurnAudio, TurnText, Usage]
    assert turn == [_as_plain(m) for m in messages]
    assert "".join(e.text for e in turn if isinstance(e, TurnText)).startswith("🦊")   # never a split character
    usage = turn[-1]
    assert (usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens, usage.context_id) == \
        (9, 4, 5, "ctx_1")
    assert TurnEvents.is_text(turn[0]) and not TurnEvents.is_text(turn[2])
