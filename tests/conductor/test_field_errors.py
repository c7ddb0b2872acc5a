"""A node's refusal reaches the client naming the request's field (conductor.field_errors),
and the gateway names it as its caller did (gateway.api_error): never an internal node
and item index."""
from __future__ import annotations

import pytest

from client.call_failed import CallFailed
from conductor.field_errors import in_client_terms, prompt_field
from gateway.api_error import from_call_failed
from protos.starmesh.v1 import conductor_pb2 as pb

ENGINE = "prompt ({p} tokens) + max_new_tokens ({m}) = {t} is past the context length {c}"


def _engine(p: int, m: int, c: int, where: str = "node prefill: items[0].open (node prefill): ") -> str:
    return where + ENGINE.format(p=p, m=m, t=p + m, c=c)


def test_a_max_new_tokens_the_request_set_is_named_with_the_room_left():
    got = in_client_terms("INVALID_ARGUMENT", _engine(13, 100_000, 1024), "messages", {"max_new_tokens"})
    assert got == ("params.max_new_tokens is 100000, past what the context holds after the prompt's 13 tokens: "
                   "at most 1011 (context length 1024)")


@pytest.mark.parametrize("prompt", ["text", "messages", "input_ids"])
def test_a_prompt_that_fills_the_context_names_the_field_it_came_in(prompt):
    got = in_client_terms("INVALID_ARGUMENT", _engine(18008, 16, 1024), prompt, {"max_new_tokens"})
    assert got.startswith(f"{prompt} is too long: its prompt is 18008 tokens")


def test_a_default_max_new_tokens_puts_it_on_the_prompt_and_says_both_ways_out():
    got = in_client_terms("INVALID_ARGUMENT", _engine(1020, 16, 1024), "text", set())
    assert got.startswith("text is too long") and "max_new_tokens to at most 4" in got


def test_a_services_param_message_loses_its_location():
    message = ("node talker: items[0] (node talker): params.max_frames is 5000, past what the talker's context "
               "holds after this prompt: at most 2023 frames")
    assert in_client_terms("INVALID_ARGUMENT", message, "text", {"max_frames"}).startswith("params.max_frames is 5000")
    pushed = "node talker: items[3].push (node talker): params.min_frames is 9"
    assert in_client_terms("INVALID_ARGUMENT", pushed, "text", set()) == "params.min_frames is 9"


@pytest.mark.parametrize("status, message", [
    ("UNAVAILABLE", "node talker: " + ENGINE.format(p=1, m=1, t=2, c=1)),   # not a field error
    ("INVALID_ARGUMENT", "node talker: open.inputs.prompt_ids must be non-empty integer ids"),  # internal
    ("INTERNAL", "node talker: params.max_frames is 9"),
])
def test_anything_else_keeps_the_executors_message(status, message):
    assert in_client_terms(status, message, "text", set()) == message


def test_the_prompt_field_is_the_one_the_request_used():
    assert prompt_field(pb.GenerateRequest(model="m", text="hi")) == "text"
    request = pb.GenerateRequest(model="m")
    request.messages.add(role="user")
    assert prompt_field(request) == "messages"
    assert prompt_field(pb.GenerateRequest(model="m", input_ids=[1, 2])) == "input_ids"
    assert prompt_field(pb.GenerateRequest(model="m")) is None


@pytest.mark.parametrize("message, fields, param, head", [
    ("params.max_new_tokens is 100000, past ...", {"params.max_new_tokens": "max_tokens"}, "max_tokens",
     "max_tokens is 100000"),
    ("text is too long: its prompt is 9 tokens", {"text": "input"}, "input", "input is too long"),
    ("params.max_frames is 5000, past ...", {}, "max_frames", "max_frames is 5000"),
    ("params.speaker 'x' is not a voice", {"params.speaker": "voice"}, "voice", "voice 'x'"),
    ("text-only walks take no audio", {"text": "input"}, "input", "text-only walks"),  # not the field's name
])
def test_the_gateway_names_the_field_as_its_caller_did(message, fields, param, head):
    error = from_call_failed(CallFailed("INVALID_ARGUMENT", message), fields)
    assert error.param == param and error.message.startswith(head)


def test_the_conductor_fails_the_call_with_the_same_status_in_the_clients_terms():
    from conductor.executor import RequestFailed
    from conductor.field_errors import client_failure

    request = pb.GenerateRequest(model="m", text="hi")
    request.params.update({"max_new_tokens": 100_000})
    failed = client_failure(RequestFailed("INVALID_ARGUMENT", _engine(13, 100_000, 1024)), request)
    assert isinstance(failed, RequestFailed) and failed.status == "INVALID_ARGUMENT"
    assert str(failed).startswith("params.max_new_tokens is 100000")
    unset = client_failure(RequestFailed("INVALID_ARGUMENT", _engine(1020, 16, 1024)), pb.GenerateRequest(text="x"))
    assert str(unset).startswith("text is too long")
