"""Text and chat messages in (conductor.chat_request): the server applies the model's own
tokenizer and chat template (the tiny checkpoints ship one), or sends the user text as
UTF-8 bytes to a text encoder; what cannot be applied is INVALID_ARGUMENT naming the
field; ListModels' description (conductor.model_info) comes from the typed params."""
from __future__ import annotations

import dataclasses

import pytest

from conductor.generate_request import parse_generate_request
from conductor.input_limits import InputLimits
from conductor.model_info import model_info
from conductor.placement import Placement
from core.errors import InvalidArgument
from engine.checkpoints.tiny_omni import chat_prompt, write_omni_tokenizer
from pipelines.registry import build_model
from protos.starmesh.v1 import conductor_pb2 as pb

LIMITS = InputLimits(max_messages=3)
SPEECH_NODES = ["prefill", "decode", "talker", "code2wav"]
IMAGE_NODES = ["clip_l", "clip_g", "t5", "join_text", "init_latent", "decode", "denoise_loop"]


def _placement(nodes, **extra) -> Placement:
    return Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}}, "placement": {n: "s" for n in nodes},
                                **extra})


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("tok")
    write_omni_tokenizer(directory)
    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


@pytest.fixture(scope="module")
def models():
    speech = build_model("qwen3_omni", "omni", _placement(SPEECH_NODES, kv_contexts={"s": ["prefill", "decode"]}), {})
    return {"omni": dataclasses.replace(speech, voices=("chelsie", "ethan")),
            "sd3": build_model("text_to_image", "sd3", _placement(IMAGE_NODES), {"fused": True}),
            "world": build_model("world_model", "world", _placement(["encode", "encode_goal", "prefill", "rollout",
                                                                     "plan"]), {})}


def _parse(models, tokenizer, req):
    return parse_generate_request(req, models[req.model], LIMITS, tokenizer)


def test_text_and_messages_take_the_chat_template(models, tokenizer):
    (ids,) = _parse(models, tokenizer, pb.GenerateRequest(model="omni", text="Hello there")).inputs["input_ids"]
    assert ids.tolist() == chat_prompt("Hello there")
    req = pb.GenerateRequest(model="omni")
    req.messages.add(role="system").content.add(text="Be brief.")
    turn = req.messages.add(role="user")
    turn.content.add(text="Hello ")
    turn.content.add(text="there")
    (ids,) = _parse(models, tokenizer, req).inputs["input_ids"]
    expected = [256, 258, 10, *b"Be brief.", 257, 10, *chat_prompt("Hello there")]
    assert ids.tolist() == expected


def test_an_image_model_reads_the_user_text_as_utf8(models, tokenizer):
    (prompt,) = _parse(models, None, pb.GenerateRequest(model="sd3", text="a fox 🦊")).inputs["prompt"]
    assert bytes(prompt.tolist()) == "a fox 🦊".encode()


@pytest.mark.parametrize("model, build, words", [
    ("omni", lambda r: (setattr(r, "text", "a"), r.messages.add(role="user")), ("text and messages",)),
    ("omni", lambda r: r.messages.add(role="robot"), ("messages[0].role", "robot")),
    ("omni", lambda r: r.messages.add(role="user").content.add(), ("messages[0].content[0]",)),
    ("omni", lambda r: [r.messages.add(role="user") for _ in range(4)], ("max_messages",)),
    ("omni", lambda r: (setattr(r, "text", "a"), r.input_ids.append(1)), ("input_ids", "give one")),
    ("omni", lambda r: (setattr(r, "text", "a"), r.params.update({"speaker": "nobody"})),
     ("params.speaker", "nobody", "chelsie")),
    ("world", lambda r: setattr(r, "text", "a"), ("takes no text",)),
    ("sd3", lambda r: r.messages.add(role="system").content.add(text="x"), ("no user text",)),
])
def test_what_cannot_be_applied_is_named(models, tokenizer, model, build, words):
    req = pb.GenerateRequest(model=model)
    build(req)
    with pytest.raises(InvalidArgument) as e:
        _parse(models, tokenizer, req)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_without_a_tokenizer_text_is_refused_and_ids_still_pass(models):
    with pytest.raises(InvalidArgument, match="no tokenizer"):
        _parse(models, None, pb.GenerateRequest(model="omni", text="hi"))
    assert "input_ids" in _parse(models, None, pb.GenerateRequest(model="omni", input_ids=[1, 2])).inputs


def test_list_models_describes_params_outputs_and_voices(models):
    info = model_info(models["omni"], has_tokenizer=True)
    params = {p.name: p for p in info.params}
    frames = params["max_frames"]
    assert frames.type == "int" and frames.min == 1 and not frames.HasField("max")
    assert frames.default_value.WhichOneof("kind") == "null_value" and "frames" in frames.help
    top_p = params["talker_top_p"]
    assert (top_p.min, top_p.max, top_p.exclusive_min, top_p.default_value.number_value) == (0, 1, True, 1.0)
    assert params["speaker"].default_value.string_value == "ethan" and info.voice_param == "speaker"
    assert list(info.voices) == ["chelsie", "ethan"] and info.accepts_text and info.sample_rate == 24000
    assert {o.name: o.event for o in info.outputs} == {"audio": "audio", "codes": "tensor", "first_token": "text",
                                                        "token": "text"}
    assert list(info.output_modalities) == [pb.MODALITY_TEXT, pb.MODALITY_AUDIO]
    image = model_info(models["sd3"], has_tokenizer=False)
    steps = {p.name: p for p in image.params}["steps"]
    assert (steps.min, steps.max, steps.default_value.number_value) == (1, 1000, 28)
    assert image.accepts_text and list(image.output_modalities) == [pb.MODALITY_IMAGE]
    assert not model_info(models["world"], has_tokenizer=False).accepts_text
