"""The gateway's failures as OpenAI clients expect them: the SDK's typed exceptions with
the field named, a capacity refusal as 429 with Retry-After, a wrong key as 401, a
client that leaves freeing its request everywhere, /health and /metrics."""
from __future__ import annotations

import httpx
import pytest

from tests.fixtures.services import describe, wait_until
from tests.gateway.gateway_mesh import KEY, LONG, SPEECH

pytestmark = pytest.mark.timeout(300)
HELLO = [{"role": "user", "content": "Hello there"}]


def _param(e) -> str:
    return e.value.body["param"] if isinstance(e.value.body, dict) else None


@pytest.mark.parametrize("kwargs, param", [
    ({"voice": "alloy"}, "voice"),                        # not a voice of the model
    ({"voice": "ethan", "speed": 2.0}, "speed"),
    ({"voice": "ethan", "response_format": "aac"}, "response_format"),
    ({"voice": "ethan", "extra_body": {"loudness": 3}}, "loudness"),       # no such param
    ({"voice": "ethan", "extra_body": {"max_frames": -1}}, "max_frames"),  # the conductor's range check
])
def test_bad_speech_input_is_a_bad_request_naming_the_field(sdk, kwargs, param):
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as e:
        sdk.audio.speech.create(model="omni", input="Hello there", **kwargs)
    assert _param(e) == param and param in e.value.body["message"]


def test_bad_chat_input_names_the_field(sdk):
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as e:
        sdk.chat.completions.create(model="omni", messages=[{"role": "tool", "content": "x"}])
    assert _param(e) == "messages[0].role"
    with pytest.raises(BadRequestError) as e:
        sdk.chat.completions.create(model="omni", messages=HELLO, max_tokens="many")
    assert _param(e) == "max_tokens"
    with pytest.raises(BadRequestError) as e:
        sdk.chat.completions.create(model="omni", messages=HELLO, tools=[{"type": "function",
                                                                          "function": {"name": "f"}}])
    assert _param(e) == "tools"
    with pytest.raises(BadRequestError) as e:
        sdk.images.generate(model="omni", prompt="a fox")
    assert _param(e) == "model"


def test_unknown_model_is_not_found_and_a_wrong_key_is_refused(sdk, mesh):
    from openai import AuthenticationError, NotFoundError, OpenAI

    with pytest.raises(NotFoundError) as e:
        sdk.chat.completions.create(model="gpt-nothing", messages=HELLO)
    assert _param(e) == "model" and "gpt-nothing" in e.value.body["message"]
    with OpenAI(base_url=f"{mesh.url}/v1", api_key="wrong", max_retries=0) as stranger:
        with pytest.raises(AuthenticationError):
            stranger.models.list()
        with pytest.raises(AuthenticationError):
            stranger.audio.speech.create(model="omni", input="Hello there", voice="ethan")


def _long_speech(mesh, client: httpx.Client):
    """A streamed request on `omni-one` (one slot) that runs for minutes unless cancelled:
    (the response, its byte iterator, kept: a collected iterator closes the response)."""
    request = client.build_request("POST", f"{mesh.url}/v1/audio/speech", headers={"authorization": f"Bearer {KEY}"},
                                   json={"model": "omni-one", "input": "Hello there", "voice": "ethan",
                                         "response_format": "pcm", **LONG})
    response = client.send(request, stream=True)
    assert response.status_code == 200
    chunks = response.iter_bytes()
    next(chunks)  # audio is flowing: the request holds omni-one's slot
    return response, chunks


def _no_open_requests(mesh) -> bool:
    return all(describe(p.address).num_open_requests == 0 for p in mesh.procs)


def test_capacity_is_429_with_retry_after_and_a_client_that_leaves_frees_its_request(sdk, mesh):
    from openai import RateLimitError

    client = httpx.Client(timeout=120)  # held open: a collected client would close the stream
    held, _chunks = _long_speech(mesh, client)
    try:
        with pytest.raises(RateLimitError) as e:
            sdk.audio.speech.create(model="omni-one", input="Hello there", voice="ethan", extra_body=SPEECH)
        assert int(e.value.response.headers["retry-after"]) >= 1 and int(e.value.response.headers["retry-after-ms"]) > 0
    finally:
        held.close()  # the client leaves mid-stream
        client.close()
    assert wait_until(lambda: _no_open_requests(mesh), 60), "a disconnected request stayed open in the mesh"
    # and the conductor gave its slot back: the next request on omni-one is admitted
    wait_until(lambda: _admitted(sdk), 60)
    assert _admitted(sdk)


def _admitted(sdk) -> bool:
    from openai import RateLimitError

    try:
        sdk.audio.speech.create(model="omni-one", input="Hello there", voice="ethan", response_format="pcm",
                                extra_body=SPEECH)
        return True
    except RateLimitError:
        return False


def test_health_needs_no_token_and_metrics_count_requests(mesh, sdk):
    sdk.models.list()
    health = httpx.get(f"{mesh.url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["models"] == {m: "SERVING" for m in ("omni", "omni-one", "sd3", "bagel")}
    assert httpx.get(f"{mesh.url}/health", params={"model": "nope"}, timeout=30).status_code == 404
    text = httpx.get(f"{mesh.url}/metrics", timeout=30).text
    assert 'starmesh_gateway_requests_total{route="/v1/models",status="200"}' in text
    assert "process_cpu_seconds_total" in text
    missing = httpx.get(f"{mesh.url}/v1/nothing", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"
