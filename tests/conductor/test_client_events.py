"""Walk outputs as a client's typed events (conductor.client_events): text deltas that
never split a character, numbered audio chunks at the model's rate, codes as tensors,
only what the request wants, raw tensors on request, and a Usage that adds it up."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conductor.client_events import RequestEvents, WantedOutputs
from conductor.client_outputs import ClientOutputs
from conductor.placement import Placement
from engine.models.qwen3_omni.tiny import write_omni_tokenizer
from cluster.registry import build_model

NODES = ["prefill", "decode", "talker", "code2wav"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("tok")
    write_omni_tokenizer(directory)
    placement = Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}},
                                     "placement": {n: "s" for n in NODES}, "kv_contexts": {"s": ["prefill", "decode"]}})
    outputs = ClientOutputs()
    yield build_model("qwen3-omni", "omni", placement, {}), outputs, AutoTokenizer.from_pretrained(str(directory))
    outputs.close()


def _run(setup, wanted=WantedOutputs()):
    model, outputs, tokenizer = setup
    events = RequestEvents(model, outputs, "r", tokenizer, wanted, t0=0.0, prompt_tokens=5)
    fox = list("🦊".encode())
    stream = [("first_token", torch.tensor([fox[0]])), ("token", torch.tensor([fox[1]])),
              ("codes", torch.tensor([1, 2, 3, 4])), ("audio", torch.full((480,), 0.25)),
              ("token", torch.tensor(fox[2:])), ("audio", torch.full((240,), -0.5)), ("token", torch.tensor([257]))]
    out = [ev for i, (name, value) in enumerate(stream) for ev in events.of(name, value, now=0.1 * (i + 1))]
    return out + events.end(now=1.0)


def test_outputs_become_typed_events(setup):
    events = _run(setup)
    kinds = [ev.WhichOneof("kind") for ev in events]
    assert kinds == ["text", "text", "tensor", "audio", "text", "audio", "text", "usage"]
    texts = [ev.text for ev in events if ev.WhichOneof("kind") == "text"]
    assert [t.text for t in texts] == ["", "", "🦊", ""] and sum((list(t.token_ids) for t in texts), []) == \
        [*"🦊".encode(), 257]
    audio = [ev.audio for ev in events if ev.WhichOneof("kind") == "audio"]
    assert [(a.sequence_number, a.num_samples, a.sample_rate) for a in audio] == [(0, 480, 24000), (1, 240, 24000)]
    assert np.frombuffer(audio[1].samples, "<f4").tolist() == [-0.5] * 240
    usage = events[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (5, 5)
    assert usage.audio_seconds == pytest.approx(720 / 24000) and usage.time_to_first_audio_ms == pytest.approx(400)
    assert usage.latency_ms == pytest.approx(1000) and usage.real_time_factor == pytest.approx(1 / (720 / 24000))


def test_only_what_the_request_wants_is_sent(setup):
    audio_only = [ev.WhichOneof("kind") for ev in _run(setup, WantedOutputs(frozenset({"audio"})))]
    assert audio_only == ["audio", "audio", "usage"]
    raw = _run(setup, WantedOutputs(frozenset({"text"}), frozenset({"audio"})))
    assert [ev.WhichOneof("kind") for ev in raw].count("tensor") == 2
    assert {ev.tensor.name for ev in raw if ev.WhichOneof("kind") == "tensor"} == {"audio"}


def test_a_request_that_gets_audio_is_one_whose_text_may_wait(setup):
    model, outputs, tokenizer = setup

    def wants_audio(wanted):
        return RequestEvents(model, outputs, "r", tokenizer, wanted).wants_audio

    assert wants_audio(WantedOutputs()) and wants_audio(WantedOutputs(frozenset({"text", "audio"})))
    assert not wants_audio(WantedOutputs(frozenset({"text"})))  # its text is what it reads: it goes at once
    assert wants_audio(WantedOutputs(frozenset({"text"}), frozenset({"audio"})))  # the audio, raw
