"""A media prefill's open inputs -> the prompt ids widened to the encoders' rows and the
thinker's PromptMedia.

Inputs (one clip and/or one image, as the media walks feed them):
    input_ids        [P] with one placeholder run per medium (one id, or already its rows)
    audio_embeds     [a, hidden]                     (audio_encoder.embeds)
    image_embeds     [v, hidden]; image_deepstack [layers, v, hidden]; image_grid [3] (t, h, w)
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


def media_prompt(ids: list[int], inputs, tokens: MediaTokens):
    """(widened ids, PromptMedia, image grids) of a media prefill's inputs."""
    audio, images = [], []
    if "audio_embeds" in inputs:
        audio.append(_rows(inputs, "audio_embeds", 2))
    if "image_embeds" in inputs:
        grid = inputs.get("image_grid")
        if grid is None or grid.dtype.is_floating_point or grid.numel() != 3:
            raise InvalidArgument("open.inputs.image_grid must be 3 integers (t, h, w)")
        deepstack = _rows(inputs, "image_deepstack", 3) if "image_deepstack" in inputs else torch.zeros(0)
        images.append(ImageRows(_rows(inputs, "image_embeds", 2), list(deepstack.unbind(0)),
                                tuple(int(v) for v in grid.reshape(-1).tolist())))
    if not audio and not images:
        raise InvalidArgument("open.inputs: a media prefill needs audio_embeds and/or image_embeds")
    ids = widen(ids, tokens.audio_token_id, [a.shape[0] for a in audio], "audio")
    ids = widen(ids, tokens.image_token_id, [len(im.embeds) for im in images], "image")
    media = build_prompt_media(ids, tokens, audio, images)
    return ids, media, [im.grid for im in images]
