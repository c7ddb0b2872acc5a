"""The gateway as its users meet it: the official `openai` SDK against `starmesh gateway`
on loopback, in front of a real mesh (tests/gateway/gateway_mesh.py). Speech, chat and
images equal what the starmesh CLI makes for the same request; errors arrive as the
SDK's typed exceptions."""
from __future__ import annotations

import base64
import io
import wave

import numpy as np
import pytest

from tests.gateway.gateway_mesh import SPEECH, starmesh

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def spoken(mesh, tmp_path_factory):
    """What `starmesh speak` writes for "Hello there" (int16 samples) and its text ids."""
    import json

    out = tmp_path_factory.mktemp("speak") / "ref.wav"
    done = starmesh("speak", "--conductor", mesh.conductor, "--model", "omni", "--text", "Hello there", "-o",
                    str(out), "--max-frames", "10", "--min-frames", "10", "--max-text-tokens", "8", "--json")
    assert done.returncode == 0, done.stderr
    with wave.open(str(out)) as f:
        samples = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    return samples, json.loads(done.stdout)["text_ids"]


def _wav_samples(data: bytes) -> np.ndarray:
    """int16 samples of a WAV (a streamed one's header gives no length: read to the end)."""
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data"
    with wave.open(io.BytesIO(data[:44] + b"")) as f:
        assert (f.getnchannels(), f.getsampwidth(), f.getframerate()) == (1, 2, 24000)
    return np.frombuffer(data[44:], dtype="<i2")


def test_speech_wav_and_pcm_equal_starmesh_speak(sdk, spoken):
    ref, _ = spoken
    wav = sdk.audio.speech.create(model="omni", input="Hello there", voice="ethan", response_format="wav",
                                  extra_body=SPEECH)
    assert np.array_equal(_wav_samples(wav.content), ref)
    with sdk.audio.speech.with_streaming_response.create(model="omni", input="Hello there", voice="ethan", response_format="pcm",
                                                         extra_body=SPEECH) as response:
        chunks = list(response.iter_bytes())
    assert len(chunks) >= 1 and np.array_equal(np.frombuffer(b"".join(chunks), dtype="<i2"), ref)


def test_speech_sse_deltas_carry_the_same_audio(sdk, spoken):
    ref, _ = spoken
    with sdk.audio.speech.with_streaming_response.create(model="omni", input="Hello there", voice="ethan", response_format="pcm",
                                                         stream_format="sse", extra_body=SPEECH) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    import json

    events = [json.loads(line[len("data: "):]) for line in lines]
    assert [e["type"] for e in events][-1] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] > 0
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert np.array_equal(np.frombuffer(pcm, dtype="<i2"), ref)


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus"])
def test_speech_in_compressed_formats_decodes(sdk, spoken, fmt):
    import soundfile

    ref, _ = spoken
    audio = sdk.audio.speech.create(model="omni", input="Hello there", voice="ethan", response_format=fmt, extra_body=SPEECH)
    samples, rate = soundfile.read(io.BytesIO(audio.content), dtype="int16")
    assert rate == 24000 and abs(len(samples) - len(ref)) <= 2048  # codecs pad to their frames
    if fmt == "flac":  # lossless
        assert np.array_equal(samples, ref)


def test_chat_stream_text_is_the_decoded_ids(sdk, mesh, spoken):
    from transformers import AutoTokenizer

    _, ids = spoken
    text = AutoTokenizer.from_pretrained(mesh.checkpoint, local_files_only=True).decode(ids, skip_special_tokens=True)
    stream = sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": "Hello there"}],
                                         max_tokens=8, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    got = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert got == text and text
    assert chunks[-1].usage.completion_tokens == len(ids)
    whole = sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": "Hello there"}],
                                        max_tokens=8)
    assert whole.choices[0].message.content == text and whole.usage.completion_tokens == len(ids)


def test_chat_with_audio_equals_the_speech_pipeline(sdk, spoken):
    ref, _ = spoken
    answer = sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": "Hello there"}],
                                         modalities=["text", "audio"], audio={"voice": "ethan", "format": "wav"},
                                         max_tokens=8, extra_body={"max_frames": 10, "min_frames": 10})
    audio = answer.choices[0].message.audio
    assert np.array_equal(_wav_samples(base64.b64decode(audio.data)), ref)
    assert audio.transcript == answer.choices[0].message.content
    stream = sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": "Hello there"}],
                                         modalities=["text", "audio"], audio={"voice": "ethan", "format": "pcm16"},
                                         max_tokens=8, stream=True, extra_body={"max_frames": 10, "min_frames": 10})
    pcm = b"".join(base64.b64decode(c.choices[0].delta.audio.data) for c in stream
                   if c.choices and c.choices[0].delta.audio)
    assert np.array_equal(np.frombuffer(pcm, dtype="<i2"), ref)


def test_images_generate_equals_starmesh_imagine(sdk, mesh, tmp_path):
    out = tmp_path / "ref.png"
    done = starmesh("imagine", "--conductor", mesh.conductor, "--model", "sd3", "--prompt", "a red fox", "-o",
                    str(out), "--steps", "2", "--size", "64x64", "--seed", "3")
    assert done.returncode == 0, done.stderr
    got = sdk.images.generate(model="sd3", prompt="a red fox", size="64x64", response_format="b64_json",
                              extra_body={"steps": 2, "seed": 3})
    assert base64.b64decode(got.data[0].b64_json) == out.read_bytes()
    # n images: n requests side by side (batched on the DiT, so not bit-equal to one alone), seeds 3 and 4
    two = [base64.b64decode(d.b64_json) for d in sdk.images.generate(model="sd3", prompt="a red fox", size="64x64", n=2,
                                                                      extra_body={"steps": 2, "seed": 3}).data]
    assert len(two) == 2 and two[0] != two[1] and all(png.startswith(b"\x89PNG") for png in two)


def test_models_list_what_the_conductor_serves(sdk):
    assert {m.id for m in sdk.models.list()} == {"omni", "omni-one", "sd3", "bagel"}
    assert sdk.models.retrieve("sd3").id == "sd3"


def test_chat_hears_and_sees_openai_content_parts(sdk, mesh):
    """input_audio and an image_url data URL reach the encoders: the text equals the gRPC
    SDK's for the same clip, image and question."""
    import asyncio

    from client.speech import speak
    from tests.e2e.test_omni_media_mesh import png_bytes, wav_bytes
    from tests.gateway.gateway_mesh import KEY

    clip, image = wav_bytes(1.0), png_bytes(28, 28)
    content = [{"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(image).decode()}},
               {"type": "text", "text": "And this?"}]
    answer = sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": content}], max_tokens=8,
                                         extra_body={"max_frames": 8})
    from client.connection import Connection

    ref = asyncio.run(speak(Connection(mesh.conductor, KEY), "omni", None, {"max_new_tokens": 8, "max_frames": 8},
                            text="And this?", audio=clip, image=image))
    assert answer.choices[0].message.content == ref.text and ref.text_ids


def test_chat_watches_a_video_url_part(sdk, mesh):
    """The video_url extension (a data:video/gif URL) reaches the vision tower; a chat answer
    without audio is the gRPC SDK's text-only answer (the chat_media walk)."""
    import asyncio

    from client.connection import Connection
    from client.speech import speak
    from tests.gateway.gateway_mesh import KEY
    from tests.pipelines.test_omni_video import gif_bytes

    clip = gif_bytes(6)
    content = [{"type": "video_url", "video_url": {"url": "data:video/gif;base64," + base64.b64encode(clip).decode()}},
               {"type": "text", "text": "What happens?"}]
    answer = sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": content}], max_tokens=8)
    ref = asyncio.run(speak(Connection(mesh.conductor, KEY), "omni", None, {"max_new_tokens": 8},
                            text="What happens?", video=clip, text_only=True))
    assert answer.choices[0].message.content == ref.text and ref.text_ids and not ref.chunks


def test_bad_content_parts_name_the_part(sdk):
    from openai import BadRequestError

    remote = [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
    with pytest.raises(BadRequestError) as e:
        sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": remote}])
    assert e.value.body["param"] == "messages[0].content[0].image_url.url"
    wrong_type = [{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}]
    with pytest.raises(BadRequestError) as e:
        sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": wrong_type}])
    assert e.value.body["param"] == "messages[0].content[0].video_url.url"
    corrupt = [{"type": "input_audio", "input_audio": {"data": base64.b64encode(b"RIFFnot a wav").decode(),
                                                       "format": "wav"}}]
    with pytest.raises(BadRequestError) as e:
        sdk.chat.completions.create(model="omni", messages=[{"role": "user", "content": corrupt}])
    assert e.value.body["param"].startswith("messages[0].content[0]")
