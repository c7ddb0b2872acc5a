"""Qwen3-Omni watching a video (an animated GIF) in-process, against transformers on the tiny
checkpoint (fp32): the vision tower on the sampled frames equals transformers' visual tower;
the runner's text ids, codec codes and waveform equal generate(return_audio=True) given the
video (alone and with a clip); the video's rope ids step by position_id_per_seconds x
seconds per temporal patch; frames are sampled as the video processor samples them; bad
videos are InvalidArgument naming the field."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.tiny import TOKENS, media_chat_prompt
from engine.models.qwen3_omni.media_prompt import ImageRows, build_prompt_media
from engine.models.qwen3_omni.video_frames import VideoConfig, sample_indices
from pipelines.qwen3_omni.requests import SpeechRequest
from pipelines.qwen3_omni.runner import SpeechRunner
from tests.engine.test_prompt_media import Media
from tests.pipelines.omni_reference import OmniReference


def gif_bytes(num_frames: int, width: int = 80, height: int = 60, frame_ms: int = 500, seed: int = 0) -> bytes:
    """An animated GIF of random frames (each frame_ms long)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    frames = [Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)) for _ in range(num_frames)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=frame_ms, loop=0)
    return out.getvalue()


@pytest.fixture(scope="module")
def media(tiny_omni):
    return Media(tiny_omni)


def _video_inputs(media: Media, gif: bytes, seconds: float | None = None, text: str = "What happens?"):
    """(prompt ids, PromptMedia, transformers' kwargs) for a video and, with `seconds`, a clip."""
    pixels, grid, per_grid = media.features.video(gif, "video")
    out = media.vision(pixels, [grid])
    video = ImageRows(out.embeds[0], out.deepstack[0], grid, per_grid)
    audio, kwargs = [], {}
    if seconds is not None:
        t = np.arange(int(seconds * 16000)) / 16000
        mel = media.features.audio_samples((0.3 * np.sin(2 * np.pi * 330 * t)).astype(np.float32), "audio")
        audio = media.audio([mel])
        kwargs.update(input_features=mel[None], feature_attention_mask=torch.ones(1, mel.shape[1], dtype=torch.long))
    kwargs.update(pixel_values_videos=pixels, video_grid_thw=torch.tensor([grid]),
                  video_second_per_grid=torch.tensor([per_grid]))
    ids = media_chat_prompt(text, tuple(a.shape[0] for a in audio), (), (len(video.embeds),))
    return ids, build_prompt_media(ids, media.tokens, audio, [], [video]), kwargs


def test_vision_tower_on_video_frames_matches_transformers(media):
    pixels, grid, _ = media.features.video(gif_bytes(12), "video")
    assert grid[0] == 3  # 6 s at 1 fps: 6 frames, 3 temporal patches of 2
    ours = media.vision(pixels, [grid])
    with torch.no_grad():
        ref = media.hf.model.visual(pixels, grid_thw=torch.tensor([grid]))
    torch.testing.assert_close(ours.embeds[0], ref.pooler_output, atol=1e-5, rtol=0)
    for mine, theirs in zip(ours.deepstack[0], ref.deepstack_features):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("num_frames, seconds", [(12, None), (6, 1.5)], ids=["video", "audio_video"])
def test_video_question_matches_transformers(media, tiny_omni, num_frames, seconds):
    ids, prompt_media, kwargs = _video_inputs(media, gif_bytes(num_frames), seconds)
    ref = OmniReference(tiny_omni).generate(ids, 16, 40, **kwargs)
    runner = SpeechRunner.from_checkpoint(str(tiny_omni))
    ours = runner.generate([SpeechRequest("watched", ids, max_text_tokens=16, max_frames=40, media=prompt_media)])[0]
    assert ours.text_ids == ref["text_ids"]
    assert torch.equal(ours.codes, ref["codes"])
    torch.testing.assert_close(ours.audio, ref["audio"], atol=1e-4, rtol=0)


def test_video_time_ids_step_by_seconds_per_patch(media):
    ids, prompt_media, _ = _video_inputs(media, gif_bytes(12))
    first = ids.index(TOKENS["<|video_pad|>"])
    block = prompt_media.positions[:, first:first + 3 * 4]  # 3 patches of a 2 x 2 merged grid
    step = media.tokens.position_id_per_seconds * 2  # 2 s per temporal patch at the tiny processor's 1 fps
    assert block[0].unique().tolist() == [first, first + step, first + 2 * step]
    assert prompt_media.video_grids == ((3, 4, 4),) and prompt_media.video_seconds == (2.0,)


@pytest.mark.parametrize("total, video_fps, expected", [
    (12, 2.0, [0, 2, 4, 6, 8, 10]),     # 6 s sampled at 1 fps
    (3, 2.0, [0, 1]),                   # min_frames 2, floored to a multiple of T = 2
    (40, 1.0, [0, 2, 5, 7, 10, 12, 15, 17, 20, 22, 25, 27, 30, 32, 35, 37]),  # max_frames 16
])
def test_frames_are_sampled_as_the_video_processor_samples_them(total, video_fps, expected):
    config = VideoConfig(2, fps=1.0, min_frames=2, max_frames=16)
    assert sample_indices(total, video_fps, config, "video") == expected


@pytest.mark.parametrize("data, message", [
    (b"", "video is empty"),
    (b"GIF89a" + b"\x00" * 40, "video"),
    (gif_bytes(4)[:60], "video"),
    (gif_bytes(1), "at least 2"),
    (gif_bytes(40, frame_ms=20), "frames, over the limit"),
    (gif_bytes(2, width=300, height=300), "pixels a frame"),
])
def test_bad_video_is_invalid_argument_naming_the_field(media, data, message):
    import dataclasses

    features = media.features
    tight = dataclasses.replace(features.limits, max_video_frames=32, max_image_pixels=256 * 256)
    strict = type(features)(features.feature_extractor, features.image_processor, tight, features.video_config)
    with pytest.raises(InvalidArgument, match=message) as err:
        strict.video(data, "video")
    assert "video" in str(err.value)
