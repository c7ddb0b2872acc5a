"""Each pipeline declares one typed request-param class: the conductor parses a request's
params with it (every key known, every bad value INVALID_ARGUMENT naming the key) and the
services parse their part of the same dict into the same types."""
from __future__ import annotations

import pytest

from conductor.placement import Placement
from core.errors import GraphError, InvalidArgument
from engine.models.qwen3_omni import SAMPLE_RATE
from engine.models.qwen3_omni.params import TalkerParams
from engine.models.sd3.params import ImageParams
from engine.sampling_params import SamplingParams, TextParams
from pipelines.qwen3_omni.model import speech_model, speech_placement
from pipelines.qwen3_omni.params import SpeechParams
from cluster.registry import build_model


def _placement(graph_nodes) -> Placement:
    return Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}},
                                "placement": {n: "s" for n in graph_nodes}})


@pytest.fixture(scope="module")
def models():
    speech = speech_model("omni", speech_placement(["127.0.0.1:1"], ["127.0.0.1:2"]))
    text = build_model("qwen3", "tiny", _placement(["prefill", "decode"]), {})
    image_nodes = ["clip_l", "clip_g", "t5", "join_text", "init_latent", "decode", "denoise_loop"]
    image = build_model("sd3", "sd3", _placement(image_nodes), {"fused": True})
    return {"speech": speech, "text": text, "image": image}


def test_each_pipeline_declares_its_params_and_outputs(models):
    assert models["speech"].params is SpeechParams and models["speech"].sample_rate == SAMPLE_RATE == 24000
    assert models["speech"].outputs_of_kind("audio") == {"audio"}
    assert models["text"].params is TextParams and models["text"].outputs_of_kind("text") == {"first_token", "token"}
    assert models["image"].params is ImageParams and models["image"].outputs_of_kind("image") == {"image",
                                                                                                   "image_float"}


def test_a_speech_request_parses_into_the_thinker_and_talker_params(models):
    p = models["speech"].parse_params({"max_new_tokens": 12.0, "max_frames": 30.0, "min_frames": 30.0, "seed": 5.0,
                                       "speaker": "chelsie", "talker_temperature": 0.9, "first_chunk": 2.0})
    assert p.text == TextParams(max_new_tokens=12, seed=5)
    assert p.talker == TalkerParams(max_frames=30, min_frames=30, seed=5, speaker="chelsie", talker_temperature=0.9)
    assert p.first_chunk == 2
    keys = {s.name for s in SpeechParams.specs()}
    assert {"max_new_tokens", "top_k", "ignore_eos", "max_frames", "speaker", "talker_top_p", "first_chunk"} <= keys


@pytest.mark.parametrize("model, params, words", [
    ("speech", {"top_k": "x"}, "params.top_k must be an integer, got 'x'"),
    ("speech", {"temprature": 0.5}, "params.temprature is not a parameter of this model"),
    ("speech", {"talker_top_p": 0.0}, "params.talker_top_p must be in (0, 1]"),
    ("speech", {"first_chunk": -1}, "params.first_chunk must be >= 0"),
    ("speech", {"min_frames": 9, "max_frames": 4}, "params.min_frames (9) must be <= params.max_frames (4)"),
    ("speech", {"stop_token_ids": [1, "x"]}, "params.stop_token_ids must be a list of non-negative integer ids"),
    ("text", {"ignore_eos": "yes"}, "params.ignore_eos must be true or false"),
    ("text", {"first_chunk": 2}, "params.first_chunk is not a parameter of this model"),
    ("image", {"steps": 1001}, "params.steps must be in [1, 1000]"),
    ("image", {"guidance": "NaN"}, "params.guidance must be a finite number"),
    ("image", {"negative_prompt": 3}, "params.negative_prompt must be a string"),
])
def test_the_conductor_rejects_a_bad_request_naming_the_key(models, model, params, words):
    with pytest.raises(InvalidArgument) as e:
        models[model].parse_params(params)
    assert words in str(e.value)


def test_text_params_become_the_engine_sampling_params():
    p = TextParams.from_params({"max_new_tokens": 8.0, "top_k": 4.0, "stop_token_ids": [9.0], "ignore_eos": True})
    assert p.sampling((2,), stop_token_ids=(7,)) == SamplingParams(max_new_tokens=8, top_k=4, stop_token_ids=(7, 9))
    assert TextParams().sampling((2,)).eos_token_ids == (2,)


def test_talker_params_take_the_loop_bound():
    assert TalkerParams().sampling_kwargs(0)["max_new_tokens"] == 4096
    assert TalkerParams().sampling_kwargs(64)["max_new_tokens"] == 64  # the graph's max frames
    assert TalkerParams(max_frames=30).sampling_kwargs(64)["max_new_tokens"] == 30
    assert TalkerParams(max_frames=99).sampling_kwargs(64)["max_new_tokens"] == 64
    kwargs = TalkerParams(talker_temperature=0.9, talker_top_k=5, min_frames=3, seed=1).sampling_kwargs(0)
    assert kwargs == dict(max_new_tokens=4096, min_new_tokens=3, temperature=0.9, top_k=5, top_p=1.0,
                          repetition_penalty=1.05, seed=1)


def test_a_model_declares_outputs_its_walks_have(models):
    from conductor.model import ServedModel

    speech = models["speech"]
    with pytest.raises(GraphError, match=r"output_kinds\['nope'\] is not an output"):
        ServedModel("m", speech.graph, speech.placement, speech.inner_loops, output_kinds={"nope": "audio"})
    with pytest.raises(GraphError, match=r"output_kinds\['audio'\] = 'sound' is not one of"):
        ServedModel("m", speech.graph, speech.placement, speech.inner_loops, output_kinds={"audio": "sound"})
    with pytest.raises(GraphError, match="sample_rate is required"):
        ServedModel("m", speech.graph, speech.placement, speech.inner_loops, output_kinds={"audio": "audio"})
    plain = ServedModel("m", speech.graph, speech.placement, speech.inner_loops)
    assert plain.parse_params({"anything": 1}) is None  # no declared params: the services check theirs
