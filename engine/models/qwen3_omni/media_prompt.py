"""A Qwen3-Omni prompt with audio, images and videos -> the thinker's PromptMedia: the towers'
rows at the placeholder runs and the multimodal rope ids, as transformers' `get_rope_index`
gives them (use_audio_in_video False: a video's own sound, if any, is not read).

Each clip is one run of <|audio_pad|> ids (as many as its audio rows), each image one
run of <|image_pad|> ids and each video one of <|video_pad|> ids (t * h * w / merge^2).
Rope ids: every id outside an image or video run takes the next position on all three
axes; such a run starting at position s gives its token at (temporal patch f, row r, col c)
of the merged grid the ids (s + f * step, s + r, s + c), and the id after the run
continues from the largest of them + 1. step is position_id_per_seconds for an image
(one second per temporal patch) and position_id_per_seconds * seconds_per_grid for a
video. Audio rows thus keep 1-D positions, and a text-only prompt's ids are 0, 1, 2, ...
on every axis.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from core.errors import InvalidArgument
from engine.prompt_media import PromptMedia


@dataclass(frozen=True)
class MediaTokens:
    audio_token_id: int
    image_token_id: int
    spatial_merge_size: int
    position_id_per_seconds: int
    video_token_id: int = -1       # -1: a checkpoint without video input

    def __post_init__(self) -> None:
        if self.spatial_merge_size <= 0:
            raise InvalidArgument(f"MediaTokens.spatial_merge_size must be > 0, got {self.spatial_merge_size}")


def media_tokens_from_hf(cfg: dict) -> MediaTokens:
    thinker = cfg.get("thinker_config") or {}
    try:
        return MediaTokens(int(thinker["audio_token_id"]), int(thinker["image_token_id"]),
                           int((thinker.get("vision_config") or {}).get("spatial_merge_size", 2)),
                           int(thinker.get("position_id_per_seconds", 25)), int(thinker.get("video_token_id", -1)))
    except KeyError as e:
        raise InvalidArgument(f"config.json: thinker_config lacks {e.args[0]!r}") from None


@dataclass
class ImageRows:
    """An image's or a video's tower rows."""
    embeds: torch.Tensor            # [tokens, hidden]
    deepstack: list[torch.Tensor]   # per deepstack layer [tokens, hidden]
    grid: tuple[int, int, int]      # (t, h, w) in patches
    seconds_per_grid: float | None = None  # a video's seconds per temporal patch; None: an image


def time_ids(grid_t: int, seconds_per_grid: float | None, tokens: MediaTokens) -> torch.Tensor:
    """[grid_t] long time ids of a run's temporal patches, from 0, as transformers computes
    them (fp32); InvalidArgument when a video's are not whole numbers (this engine's rope
    ids are integers: the checkpoint's fps must make position_id_per_seconds * T / fps whole)."""
    seconds = torch.tensor(1.0 if seconds_per_grid is None else seconds_per_grid, dtype=torch.float32)
    ids = torch.arange(grid_t).float() * seconds * tokens.position_id_per_seconds
    if not torch.equal(ids, ids.round()):
        raise InvalidArgument(f"video seconds_per_grid {float(seconds):g} x position_id_per_seconds "
                              f"{tokens.position_id_per_seconds} gives fractional rope ids")
    return ids.long()


def _runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(start, length) of each maximal run of `token` in ids."""
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == token:
            j = i
            while j < len(ids) and ids[j] == token:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


def _check_runs(runs, sizes: list[int], what: str) -> None:
    if [n for _, n in runs] != sizes:
        raise InvalidArgument(f"prompt: {what} placeholder runs of {[n for _, n in runs]} ids do not match the "
                              f"{what} rows ({sizes})")


def rope_positions(num_ids: int, vision_runs: list[tuple[int, int]], grids: list[tuple[int, int, int]],
                   tokens: MediaTokens, seconds: list[float | None] | None = None) -> tuple[torch.Tensor, int]:
    """([3, num_ids] long rope ids, delta = largest id + 1 - num_ids) of a prompt whose image
    and video runs (prompt order) hold `grids`; seconds: per run, a video's seconds per
    temporal patch (None: an image; all images when not given)."""
    merge = tokens.spatial_merge_size
    pieces, next_id, at = [], 0, 0
    seconds = seconds or [None] * len(grids)
    for (start, length), (t, h, w), sec in zip(vision_runs, grids, seconds):
        text = torch.arange(next_id, next_id + start - at)
        pieces.append(text.expand(3, -1))
        next_id += start - at
        gh, gw = h // merge, w // merge
        frame = time_ids(t, sec, tokens).repeat_interleave(gh * gw)
        row = torch.arange(gh).repeat_interleave(gw).repeat(t)
        col = torch.arange(gw).repeat(gh * t)
        block = torch.stack([frame, row, col]) + next_id
        pieces.append(block)
        next_id = int(block.max()) + 1
        at = start + length
    pieces.append(torch.arange(next_id, next_id + num_ids - at).expand(3, -1))
    positions = torch.cat(pieces, dim=1)
    return positions, int(positions.max()) + 1 - num_ids


def vision_runs(ids: list[int], images: list, videos: list, tokens: MediaTokens) -> list[tuple[int, int, object]]:
    """(start, length, item) of each image and video run, prompt order; `images` and `videos`
    (each in its own prompt order) are anything with `grid`; InvalidArgument when the
    runs' lengths disagree with the grids."""
    merge2 = tokens.spatial_merge_size ** 2
    runs = []
    for token, items, what in ((tokens.image_token_id, images, "image"), (tokens.video_token_id, videos, "video")):
        found = _runs(ids, token) if token >= 0 else []
        _check_runs(found, [t * h * w // merge2 for t, h, w in (it.grid for it in items)], what)
        runs += [(s, n, it) for (s, n), it in zip(found, items)]
    return sorted(runs, key=lambda r: r[0])


def vision_rope(ids: list[int], images: list, videos: list, tokens: MediaTokens) -> tuple[torch.Tensor, int]:
    """Rope ids and delta of `ids` whose image and video runs hold `images` and `videos`
    (ImageRows or anything with `grid` and `seconds_per_grid`)."""
    runs = vision_runs(ids, images, videos, tokens)
    return rope_positions(len(ids), [(s, n) for s, n, _ in runs], [it.grid for _, _, it in runs], tokens,
                          [it.seconds_per_grid for _, _, it in runs])


def build_prompt_media(prompt_ids: list[int], tokens: MediaTokens, audio: list[torch.Tensor],
                       images: list[ImageRows], videos: list[ImageRows] = ()) -> PromptMedia:
    """The PromptMedia of a prompt whose placeholder runs hold `audio` clips' rows, `images`'
    and `videos`' rows, each in prompt order; InvalidArgument when runs and rows disagree."""
    videos = list(videos)
    if not audio and not images and not videos:
        raise InvalidArgument("prompt media: no audio, images or videos (a text prompt needs no PromptMedia)")
    audio_runs = _runs(prompt_ids, tokens.audio_token_id)
    _check_runs(audio_runs, [a.shape[0] for a in audio], "audio")
    merge = tokens.spatial_merge_size
    for what, items in (("images", images), ("videos", videos)):
        for i, item in enumerate(items):
            t, h, w = item.grid
            if h % merge or w % merge or t * h * w // merge ** 2 != len(item.embeds):
                raise InvalidArgument(f"{what}[{i}]: grid {item.grid} does not give its {len(item.embeds)} rows")
    vision = vision_runs(prompt_ids, images, videos, tokens)
    positions, delta = rope_positions(len(prompt_ids), [(s, n) for s, n, _ in vision],
                                      [it.grid for _, _, it in vision], tokens,
                                      [it.seconds_per_grid for _, _, it in vision])
    runs = sorted([(s, n, a) for (s, n), a in zip(audio_runs, audio)]
                  + [(s, n, it.embeds) for s, n, it in vision], key=lambda r: r[0])
    rows_at = torch.cat([torch.arange(s, s + n) for s, n, _ in runs])
    rows = torch.cat([r for _, _, r in runs])
    deepstack_at = torch.cat([torch.arange(s, s + n) for s, n, _ in vision]) if vision \
        else torch.zeros(0, dtype=torch.int64)
    layers = len(vision[0][2].deepstack) if vision else 0
    deepstack = [torch.cat([it.deepstack[k] for _, _, it in vision]) for k in range(layers)]
    return PromptMedia(positions, delta, rows_at, rows, deepstack_at, deepstack,
                       image_grids=tuple(tuple(int(v) for v in im.grid) for im in images),
                       video_grids=tuple(tuple(int(n) for n in clip.grid) for clip in videos),
                       video_seconds=tuple(float(clip.seconds_per_grid) for clip in videos))
