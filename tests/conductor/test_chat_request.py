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
from engine.models.qwen3_omni.tiny import chat_prompt
from cluster.registry import build_model
from protos.starmesh.v1 import conductor_pb2 as pb

LIMITS = InputLimits(max_messages=3)
SPEECH_NODES = ["prefill", "decode", "talker", "code2wav"]
IMAGE_NODES = ["clip_l", "clip_g", "t5", "join_text", "init_latent", "decode", "denoise_loop"]


def _placement(nodes, **extra) -> Placement:
    return Placement.from_dict({"services": {"s": {"replicas": ["127.0.0.1:1"]}}, "placement": {n: "s" for n in nodes},
                                **extra})


@pytest.fixture(scope="module")
def models():
    speech = build_model("qwen3-omni", "omni", _placement(SPEECH_NODES, kv_contexts={"s": ["prefill", "decode"]}), {})
    return {"omni": dataclasses.replace(speech, voices=("chelsie", "ethan")),
            "sd3": build_model("sd3", "sd3", _placement(IMAGE_NODES), {"fused": True}),
            "world": build_model("vjepa2-ac", "world", _placement(["encode", "encode_goal", "prefill", "rollout",
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


WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "  # the header's magic is all the front door reads
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def _media_req(*parts, model="omni-media"):
    return pb.GenerateRequest(model=model, messages=[pb.ChatMessage(role="user", content=list(parts))])


@pytest.fixture(scope="module")
def media_models(models):
    nodes = SPEECH_NODES + ["media_encoder"]
    omni = build_model("qwen3-omni", "omni-media", _placement(nodes, kv_contexts={"s": ["prefill", "decode"]}), {})
    return {**models, "omni-media": omni}


def test_media_parts_become_placeholders_and_inputs(media_models, tokenizer):
    from engine.models.qwen3_omni.tiny import media_chat_prompt

    req = _media_req(pb.ContentPart(audio=pb.MediaPart(data=WAV, mime_type="audio/wav")),
                     pb.ContentPart(image=pb.MediaPart(data=PNG)), pb.ContentPart(text="hi"))
    parsed = _parse(media_models, tokenizer, req)
    assert parsed.inputs["input_ids"][0].tolist() == media_chat_prompt("hi", (1,), (1,))
    assert bytes(parsed.inputs["media"][0].numpy()) == WAV + PNG
    assert parsed.inputs["media_parts"][0].tolist() == [[0, len(WAV)], [1, len(PNG)]]  # (kind, bytes), in order
    assert media_models["omni-media"].graph.start(parsed.inputs) == "speak_media"


def test_media_parts_of_any_kinds_and_order_make_one_list(media_models, tokenizer):
    """An image, text, a clip, a second image and a video: one placeholder per part, in
    order, and one list of parts whose kind codes the encoder service reads."""
    from conductor.media_parts import MEDIA_KINDS
    from engine.models.qwen3_omni.tiny import TOKENS
    from services.encoder.media_list import MEDIA_KINDS as ENCODER_KINDS, unpack_media

    assert MEDIA_KINDS == ENCODER_KINDS
    gif = b"GIF89a" + b"\x00" * 8
    req = _media_req(pb.ContentPart(image=pb.MediaPart(data=PNG)), pb.ContentPart(text="hi"),
                     pb.ContentPart(audio=pb.MediaPart(data=WAV)), pb.ContentPart(image=pb.MediaPart(data=PNG)),
                     pb.ContentPart(video=pb.MediaPart(data=gif)))
    parsed = _parse(media_models, tokenizer, req)
    pads = {TOKENS["<|image_pad|>"]: "image", TOKENS["<|audio_pad|>"]: "audio", TOKENS["<|video_pad|>"]: "video"}
    assert [pads[t] for t in parsed.inputs["input_ids"][0].tolist() if t in pads] == ["image", "audio", "image",
                                                                                      "video"]
    parts = unpack_media({name: value[0] for name, value in parsed.inputs.items()})
    assert [(p.kind, p.data, p.field) for p in parts] == [
        ("image", PNG, "open.inputs[image][0]"), ("audio", WAV, "open.inputs[audio]"),
        ("image", PNG, "open.inputs[image][1]"), ("video", gif, "open.inputs[video]")]
    assert media_models["omni-media"].graph.start(parsed.inputs, frozenset({"text"})) == "chat_media"


@pytest.mark.parametrize("parts, model, field", [
    ([pb.ContentPart(audio=pb.MediaPart(data=WAV, mime_type="image/png"))], "omni-media",
     "messages[0].content[0].audio.mime_type"),
    ([pb.ContentPart(image=pb.MediaPart(data=WAV))], "omni-media", "messages[0].content[0].image: unsupported"),
    ([pb.ContentPart(audio=pb.MediaPart(data=WAV))] * 17, "omni-media",
     "messages[0].content[16]: over the limit of 16 media parts per request"),
    ([pb.ContentPart(audio=pb.MediaPart(data=WAV))], "omni", "messages[0].content[0]: model 'omni' takes no audio"),
])
def test_bad_media_parts_name_the_part(media_models, tokenizer, parts, model, field):
    with pytest.raises(InvalidArgument, match=field.replace("[", r"\[").replace("]", r"\]")):
        _parse(media_models, tokenizer, _media_req(*parts, model=model))
