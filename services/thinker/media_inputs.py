"""A media prefill's open inputs -> the prompt ids widened to the encoders' rows and the
thinker's PromptMedia.

Inputs (one clip, image or video each at most, as the media walks feed them):
    input_ids        [P] with one placeholder run per medium (one id, or already its rows)
    audio_embeds     [a, hidden]                     (audio_encoder.embeds)
    image_embeds     [v, hidden]; image_deepstack [layers, v, hidden]; image_grid [3] (t, h, w)
    video_embeds, video_deepstack, video_grid: the same for a video; video_seconds [1]
                     (seconds per temporal patch)
"""
from __future__ import annotations

import torch

from core.errors import InvalidArgument
from engine.models.qwen3_omni.media_prompt import ImageRows, MediaTokens, build_prompt_media


def widen(ids: list[int], token: int, sizes: list[int], what: str) -> list[int]:
    """ids with the k-th run of `token` made sizes[k] ids long."""
    out, k, i = [], 0, 0
    while i < len(ids):
        if ids[i] != token:
            out.append(ids[i])
            i += 1
            continue
        j = i
        while j < len(ids) and ids[j] == token:
            j += 1
        if k >= len(sizes):
            raise InvalidArgument(f"open.inputs.input_ids: more {what} placeholders than {what} inputs ({len(sizes)})")
        out += [token] * sizes[k]
        k, i = k + 1, j
    if k != len(sizes):
        raise InvalidArgument(f"open.inputs.input_ids: {k} {what} placeholder runs for {len(sizes)} {what} inputs")
    return out


def _rows(inputs, name: str, rank: int) -> torch.Tensor:
    t = inputs[name]
    if not t.dtype.is_floating_point or t.dim() != rank:
        raise InvalidArgument(f"open.inputs.{name} must be floating with {rank} dimensions, got {t.dtype} "
                              f"{tuple(t.shape)}")
    return t.to(torch.float32)


def _vision(inputs, kind: str) -> list[ImageRows]:
    """[] or the one image/video of `kind` in the inputs."""
    if f"{kind}_embeds" not in inputs:
        return []
    grid = inputs.get(f"{kind}_grid")
    if grid is None or grid.dtype.is_floating_point or grid.numel() != 3:
        raise InvalidArgument(f"open.inputs.{kind}_grid must be 3 integers (t, h, w)")
    seconds = None
    if kind == "video":
        raw = inputs.get("video_seconds")
        if raw is None or not raw.dtype.is_floating_point or raw.numel() != 1 or not float(raw.reshape(-1)[0]) > 0:
            raise InvalidArgument("open.inputs.video_seconds must be one positive float (seconds per temporal patch)")
        seconds = float(raw.reshape(-1)[0])
    name = f"{kind}_deepstack"
    deepstack = _rows(inputs, name, 3) if name in inputs else torch.zeros(0)
    return [ImageRows(_rows(inputs, f"{kind}_embeds", 2), list(deepstack.unbind(0)),
                      tuple(int(v) for v in grid.reshape(-1).tolist()), seconds)]


def media_prompt(ids: list[int], inputs, tokens: MediaTokens):
    """(widened ids, PromptMedia) of a media prefill's inputs."""
    audio = [_rows(inputs, "audio_embeds", 2)] if "audio_embeds" in inputs else []
    images, videos = _vision(inputs, "image"), _vision(inputs, "video")
    if not audio and not images and not videos:
        raise InvalidArgument("open.inputs: a media prefill needs audio_embeds, image_embeds or video_embeds")
    if videos and tokens.video_token_id < 0:
        raise InvalidArgument("open.inputs.video_embeds: this checkpoint has no video_token_id")
    ids = widen(ids, tokens.audio_token_id, [a.shape[0] for a in audio], "audio")
    ids = widen(ids, tokens.image_token_id, [len(im.embeds) for im in images], "image")
    if tokens.video_token_id >= 0:
        ids = widen(ids, tokens.video_token_id, [len(v.embeds) for v in videos], "video")
    return ids, build_prompt_media(ids, tokens, audio, images, videos)


def talker_grids(media) -> dict[str, torch.Tensor]:
    """What the talker's rope needs of a PromptMedia: image_grids [k, 3], video_grids [k, 3]
    int64 and video_seconds [k] float32."""
    return {"image_grids": torch.tensor(media.image_grids, dtype=torch.int64).reshape(-1, 3),
            "video_grids": torch.tensor(media.video_grids, dtype=torch.int64).reshape(-1, 3),
            "video_seconds": torch.tensor(media.video_seconds, dtype=torch.float32).reshape(-1)}
