"""The gateway's pure parts: gRPC status -> HTTP status and field, audio formats, body
error locations, extension params and its config."""
from __future__ import annotations

import io
import wave

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.call_failed import CallFailed
from client.model_card import ModelCard, ParamCard
from gateway.api_error import ApiError, from_call_failed
from gateway.app import _param
from gateway.audio_encoding import check_format, encode, pcm16, wav_header
from gateway.config import GatewayConfig
from gateway.extensions import request_params


@pytest.mark.parametrize("code, status", [("INVALID_ARGUMENT", 400), ("NOT_FOUND", 404), ("UNAUTHENTICATED", 401),
                                          ("PERMISSION_DENIED", 403), ("UNAVAILABLE", 503),
                                          ("DEADLINE_EXCEEDED", 504), ("INTERNAL", 500), ("DATA_LOSS", 500),
                                          ("CANCELLED", 503)])
def test_grpc_status_maps_to_the_http_status(code, status):
    assert from_call_failed(CallFailed(code, "x")).status == status


def test_a_long_echo_is_cut_and_an_error_with_a_lone_surrogate_still_encodes():
    import json

    from gateway.responses import error_response

    e = ApiError(404, "model " + repr("m" * 100_000) + " does not exist", param="x\ud800" * 2000)
    body = json.loads(error_response(e).body)["error"]
    assert len(body["message"]) <= 1003 and len(body["param"]) <= 1003 and body["param"].startswith("x\ud800")


def test_the_body_budget_holds_at_most_its_capacity():
    from gateway.body_limit import BodyBudget

    budget = BodyBudget(100)
    assert budget.take(60) and not budget.take(41) and budget.held == 60 and budget.take(40)
    budget.give(100)
    assert budget.held == 0


def test_capacity_is_429_with_retry_after_and_a_size_limit_is_413():
    refused = from_call_failed(CallFailed("RESOURCE_EXHAUSTED", "model m is at capacity", 1500))
    assert refused.status == 429 and refused.headers == {"Retry-After": "2", "retry-after-ms": "1500"}
    assert refused.body()["error"]["type"] == "rate_limit_error"
    too_big = from_call_failed(CallFailed("RESOURCE_EXHAUSTED", "input_ids has 9999999 ids, over the limit"))
    assert too_big.status == 413 and too_big.param == "input_ids" and not too_big.headers


@pytest.mark.parametrize("message, fields, param", [
    ("params.speaker 'x' is not a voice", {"params.speaker": "voice"}, "voice"),
    ("params.max_frames must be >= 1, got -1", {}, "max_frames"),
    ("messages[2].role must be one of ...", {}, "messages[2].role"),
    ("output_modalities[0] is 'image': model m makes [...]", {"output_modalities": "modalities"}, "modalities"),
    ("node talker: prompt too long", {}, None),
])
def test_the_conductors_field_becomes_the_callers(message, fields, param):
    assert from_call_failed(CallFailed("INVALID_ARGUMENT", message), fields).param == param


def test_body_error_locations_read_as_field_paths():
    assert _param(("body", "messages", 0, "role")) == "messages[0].role"
    assert _param(("body", "max_tokens")) == "max_tokens"
    assert _param(("body",)) == ""


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.lists(st.floats(-4, 4, width=32), max_size=300))
def test_pcm16_is_starmesh_speaks_conversion(samples):
    import torch

    f32 = np.asarray(samples, dtype="<f4")
    ref = (torch.from_numpy(f32.copy()).clamp(-1, 1) * 32767.0).round().to(torch.int16).numpy().astype("<i2")
    assert pcm16(f32.tobytes()) == ref.tobytes()


def test_wav_is_readable_and_a_streamed_header_says_unknown_length():
    pcm = pcm16(np.linspace(-1, 1, 480, dtype="<f4").tobytes())
    with wave.open(io.BytesIO(encode("wav", pcm, 24000))) as f:
        assert (f.getframerate(), f.getnframes(), f.readframes(480)) == (24000, 480, pcm)
    streamed = wav_header(24000)
    assert len(streamed) == 44 and streamed[4:8] == streamed[40:44] == b"\xff\xff\xff\xff"


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus"])
def test_compressed_formats_decode_at_the_rate(fmt):
    import soundfile

    pcm = pcm16((0.3 * np.sin(np.arange(24000) / 7)).astype("<f4").tobytes())
    samples, rate = soundfile.read(io.BytesIO(encode(fmt, pcm, 24000)), dtype="int16")
    assert rate == 24000 and abs(len(samples) - 24000) < 2048
    if fmt == "flac":
        assert samples.tobytes() == pcm


def test_unknown_formats_name_the_field():
    with pytest.raises(ValueError, match="response_format"):
        check_format("ogg", "response_format")
    with pytest.raises(ValueError, match="aac"):
        check_format("aac", "response_format")


CARD = ModelCard("m", ("audio",), True, ("a",), "speaker",
                 {"seed": ParamCard("seed", "int", None, None, None, False, ""),
                  "speaker": ParamCard("speaker", "string", "a", None, None, False, "")}, 24000)


def test_extensions_are_the_models_params_and_neutral_fields_ask_nothing():
    assert request_params(CARD, {"seed": 3, "presence_penalty": 0, "stop": None}, {"speaker": "a"}) == \
        {"seed": 3, "speaker": "a"}
    with pytest.raises(ApiError) as e:
        request_params(CARD, {"tools": [{}]}, {})
    assert e.value.param == "tools" and e.value.status == 400
    with pytest.raises(ApiError) as e:
        request_params(CARD, {"speaker": "a"}, {"speaker": "a"})
    assert e.value.param == "speaker"


@pytest.mark.parametrize("kwargs, field", [({"port": 70000}, "port"), ({"timeout_s": 0}, "timeout_s"),
                                           ({"host": ""}, "host"), ({"max_body_bytes": 10}, "max_body_bytes"),
                                           ({"max_bodies_in_flight_bytes": 1 << 20}, "max_bodies_in_flight_bytes"),
                                           ({"body_timeout_s": 0}, "body_timeout_s")])
def test_config_names_the_bad_field(kwargs, field):
    with pytest.raises(ValueError, match=f"gateway.{field}"):
        GatewayConfig(**kwargs)


def test_sigterm_stops_the_gateway_with_status_0():
    """A graceful stop is a clean exit (`starmesh up` reports any other status)."""
    from runtime.process import ServiceProcess

    gateway = ServiceProcess("", ["--conductor", "127.0.0.1:1"], name="gateway", command="gateway").start()
    assert gateway.stop(timeout_s=30) == 0
