"""Qwen3-Omni hearing and seeing through real services (thinker, talker, codec and one
encoder service, as child processes): a clip, an image, both, a video (an animated GIF)
and a clip with a video, sent as content parts, give transformers' generate(return_audio=True)
text ids, codec codes and waveform (fp32); so do parts in any order and number (an image,
text, a clip and a second image; an image with a video), through the same two media walks;
asked for text alone, the same text ids with no talker or code2wav node opened; two
models share the one encoder service; bad media is INVALID_ARGUMENT naming the part."""
from __future__ import annotations

import asyncio
import dataclasses
import io
import wave

import grpc
import numpy as np
import pytest
import torch

from client.events import AudioChunk, RawTensor, TextDelta
from client.generate_call import GenerateCall, Media as MediaPart, Message
from client.session import ConductorSession
from client.speech import SpeechSummary, speak
from engine.models.qwen3_omni.tiny import media_chat_prompt
from pipelines.qwen3_omni.model import speech_model, speech_placement
from runtime.process import ServiceProcess
from services.qwen3_omni.thinker_hook import thinker_hook
from tests.e2e.speech_mesh import run
from tests.engine.test_prompt_media import Media
from tests.fixtures.services import conductor_server_over
from tests.pipelines.omni_parts import encode_parts, reference_kwargs, template_ids
from tests.pipelines.omni_reference import OmniReference
from tests.pipelines.test_omni_video import gif_bytes

pytestmark = pytest.mark.timeout(300)

PARAMS = {"max_new_tokens": 16, "max_frames": 40}
CHUNK, LEFT = 300, 25  # transformers' own code2wav window: one window for 40 frames


def wav_bytes(seconds: float, rate: int = 24000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def png_bytes(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (height, width, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


def jpeg_bytes(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "JPEG")
    return out.getvalue()


# case -> (WAV, PNG, GIF, text)
CASES = {"audio": (wav_bytes(2.0), None, None, ""), "image": (None, png_bytes(56, 42), None, "What is it?"),
         "both": (wav_bytes(1.0), png_bytes(28, 28), None, "And this?"),
         "video": (None, None, gif_bytes(12), "What happens?"), "audio_video": (wav_bytes(1.0), None, gif_bytes(6), "")}
TALKING = ("talker_media", "code2wav")
# case -> one user turn's parts, in prompt order: text, or (kind, file bytes)
MIXED = {"image_text_audio_image": [("image", png_bytes(56, 42)), "Compare this ", ("audio", wav_bytes(1.0)),
                                    ("image", png_bytes(28, 28))],
         "image_video": [("image", png_bytes(28, 28)), ("video", gif_bytes(6)), "What changed?"]}


@pytest.fixture(scope="module")
def mesh(tiny_omni):
    ckpt = str(tiny_omni)
    procs = [ServiceProcess(n, ["--checkpoint", ckpt], name=n) for n in ("thinker", "talker", "codec", "encoder")]

    def models(a: list[str]) -> list:
        return [dataclasses.replace(speech_model(m, speech_placement([a[0]], [a[1]], [a[2]], [a[3]]), CHUNK, LEFT),
                                    tokenizer_dir=ckpt) for m in ("omni", "omni-b")]

    with conductor_server_over(procs, models) as conductor:
        yield conductor


@pytest.fixture(scope="module")
def expected(tiny_omni):
    """transformers' answers to each case, from the same bytes through the checkpoint's processor."""
    media, ref = Media(tiny_omni), OmniReference(tiny_omni)
    out = {}
    for case, (wav, png, gif, text) in CASES.items():
        kwargs, audio_n, image_n, video_n = {}, (), (), ()
        if wav is not None:
            mel = media.features.audio(wav, "audio")
            audio_n = (media.audio([mel])[0].shape[0],)
            kwargs.update(input_features=mel[None], feature_attention_mask=torch.ones(1, mel.shape[1], dtype=torch.long))
        if png is not None:
            pixels, grid = media.features.image(png, "image")
            image_n = (grid[0] * grid[1] * grid[2] // 4,)
            kwargs.update(pixel_values=pixels, image_grid_thw=torch.tensor([grid]))
        if gif is not None:
            pixels, grid, seconds = media.features.video(gif, "video")
            video_n = (grid[0] * grid[1] * grid[2] // 4,)
            kwargs.update(pixel_values_videos=pixels, video_grid_thw=torch.tensor([grid]),
                          video_second_per_grid=torch.tensor([seconds]))
        out[case] = ref.generate(media_chat_prompt(text, audio_n, image_n, video_n), 16, 40, **kwargs)
    hook = thinker_hook(str(tiny_omni))
    for case, content in MIXED.items():  # the prompt widened as transformers' processor widens it
        ids = hook.media_prompt(template_ids(tiny_omni, content), encode_parts(tiny_omni, content)).prompt_ids
        out[case] = ref.generate(list(ids), 16, 40, **reference_kwargs(media.features, content))
    return out


def _ask(conductor, model: str, case: str, text_only: bool = False):
    wav, png, gif, text = CASES[case]
    return speak(conductor.address, model, None, PARAMS, text=text, audio=wav, image=png, video=gif,
                 text_only=text_only)


async def _ask_parts(conductor, model: str, content: list) -> SpeechSummary:
    """One user turn of `content`'s parts in their order: its text ids, codec codes and audio."""
    parts = tuple(p if isinstance(p, str) else MediaPart(*p) for p in content)
    call = GenerateCall(model, messages=(Message("user", parts),), params=PARAMS)
    summary = SpeechSummary()
    async with ConductorSession(conductor.address) as session:
        async for ev in session.stream(call):
            if isinstance(ev, TextDelta):
                summary.text_ids += list(ev.token_ids)
            elif isinstance(ev, AudioChunk):
                summary.chunks.append(torch.from_numpy(np.frombuffer(ev.samples, dtype="<f4").copy()))
            elif isinstance(ev, RawTensor) and ev.name == "codes":
                summary.codec_codes.append(ev.value.reshape(-1).tolist())
    return summary


def _opened_nodes(conductor, model: str) -> list[str]:
    """Records the node of every item the model's executor sends from now on (opens, grants,
    pushes): the nodes each request reached."""
    executor, nodes = conductor.hosted.executors[model], []
    send = executor._send

    def recording(target, item):
        nodes.append(getattr(item, "node", None))
        send(target, item)

    executor._send = recording
    return nodes


@pytest.mark.parametrize("case", list(CASES))
def test_media_through_the_mesh_equals_transformers(mesh, expected, case):
    summary = run(_ask(mesh, "omni", case))
    ref = expected[case]
    assert summary.text_ids == ref["text_ids"]
    assert summary.codec_codes == ref["codes"].tolist()
    torch.testing.assert_close(torch.cat(summary.chunks), ref["audio"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("case", ["video", "audio"])
def test_text_only_media_request_runs_no_talker(mesh, expected, case):
    nodes = _opened_nodes(mesh, "omni")
    try:
        spoken = run(_ask(mesh, "omni", case))
        assert any(n in TALKING for n in nodes)  # the recording sees the speaking walk's talker
        nodes.clear()
        summary = run(_ask(mesh, "omni", case, text_only=True))
    finally:
        del mesh.hosted.executors["omni"]._send
    assert summary.text_ids == spoken.text_ids == expected[case]["text_ids"]
    assert not summary.codec_codes and not summary.chunks
    assert "decode" in nodes and not any(n in TALKING for n in nodes)


@pytest.mark.parametrize("case", list(MIXED))
def test_parts_in_any_order_through_the_mesh_equal_transformers(mesh, expected, case):
    """Two images around a clip, an image with a video: the speak_media walk, one encoder
    run and one media prefill, whatever the parts."""
    nodes = _opened_nodes(mesh, "omni")
    try:
        summary = run(_ask_parts(mesh, "omni", MIXED[case]))
    finally:
        del mesh.hosted.executors["omni"]._send
    ref = expected[case]
    assert summary.text_ids == ref["text_ids"]
    assert summary.codec_codes == ref["codes"].tolist()
    torch.testing.assert_close(torch.cat(summary.chunks), ref["audio"], atol=1e-4, rtol=0)
    assert nodes.count("media_encoder") == 1 and "prefill_media" in nodes


def test_two_models_share_one_encoder_service(mesh, expected):
    async def main():
        return await asyncio.gather(*(_ask(mesh, model, case) for model in ("omni", "omni-b") for case in CASES))

    results = iter(run(main()))
    for _model in ("omni", "omni-b"):
        for case in CASES:
            assert next(results).text_ids == expected[case]["text_ids"]


@pytest.mark.parametrize("audio, image, video, field", [
    (b"", None, None, "messages[0].content[0].audio.data is empty"),
    (b"OggS not a wav", None, None, "messages[0].content[0].audio: unsupported"),
    (None, b"\x89PNG\r\n\x1a\n truncated", None, "messages[0].content[0].image: "),
    (None, jpeg_bytes(1, 20000), None, "messages[0].content[0].image is 1 x 20000 pixels"),
    (None, None, b"\x89PNG\r\n\x1a\n", "messages[0].content[0].video: unsupported"),
    (None, None, gif_bytes(4)[:80], "messages[0].content[0].video"),
    (None, None, gif_bytes(1), "messages[0].content[0].video has 1 frame(s)"),
])
def test_bad_media_is_invalid_argument_naming_the_part(mesh, audio, image, video, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        run(speak(mesh.address, "omni", None, PARAMS, text="hi", audio=audio, image=image, video=video))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()
