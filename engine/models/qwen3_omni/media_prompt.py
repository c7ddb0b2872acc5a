"""A Qwen3-Omni prompt with audio and images -> the thinker's PromptMedia: the towers' rows
at the placeholder runs and the multimodal rope ids, as transformers' `get_rope_index`
gives them.

Each clip is one run of <|audio_pad|> ids (as many as its audio rows), each image one
run of <|image_pad|> ids (t * h * w / merge^2). Rope ids: every id outside an image run
takes the next position on all three axes; an image run starting at position s gives
its token at (frame f, row r, col c) of the merged grid the ids (s + f * per_second,
s + r, s + c), and the id after the run continues from the largest of them + 1. Audio
rows thus keep 1-D positions, and a text-only prompt's ids are 0, 1, 2, ... on every axis.
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

    def __post_init__(self) -> None:
        if self.spatial_merge_size <= 0:
            raise InvalidArgument(f"MediaTokens.spatial_merge_size must be > 0, got {self.spatial_merge_size}")


def media_tokens_from_hf(cfg: dict) -> MediaTokens:
    thinker = cfg.get("thinker_config") or {}
    try:
        return MediaTokens(int(thinker["audio_token_id"]), int(thinker["image_token_id"]),
                           int((thinker.get("vision_config") or {}).get("spatial_merge_size", 2)),
                           int(thinker.get("position_id_per_seconds", 25)))
    except KeyError as e:
        raise InvalidArgument(f"config.json: thinker_config lacks {e.args[0]!r}") from None


@dataclass
class ImageRows:
    embeds: torch.Tensor            # [tokens, hidden]
    deepstack: list[torch.Tensor]   # per deepstack layer [tokens, hidden]
    grid: tuple[int, int, int]      # (t, h, w) in patches


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


def rope_positions(num_ids: int, image_runs: list[tuple[int, int]], grids: list[tuple[int, int, int]],
                   tokens: MediaTokens) -> tuple[torch.Tensor, int]:
    """([3, num_ids] long rope ids, delta = largest id + 1 - num_ids)."""
    merge = tokens.spatial_merge_size
    pieces, next_id, at = [], 0, 0
    for (start, length), (t, h, w) in zip(image_runs, grids):
        text = torch.arange(next_id, next_id + start - at)
        pieces.append(text.expand(3, -1))
        next_id += start - at
        gh, gw = h // merge, w // merge
        frame = (torch.arange(t) * tokens.position_id_per_seconds).repeat_interleave(gh * gw)
        row = torch.arange(gh).repeat_interleave(gw).repeat(t)
        col = torch.arange(gw).repeat(gh * t)
        block = torch.stack([frame, row, col]) + next_id
        pieces.append(block)
        next_id = int(block.max()) + 1
        at = start + length
    pieces.append(torch.arange(next_id, next_id + num_ids - at).expand(3, -1))
    positions = torch.cat(pieces, dim=1)
    return positions, int(positions.max()) + 1 - num_ids


def image_rope(ids: list[int], grids: list[tuple[int, int, int]], tokens: MediaTokens) -> tuple[torch.Tensor, int]:
    """Rope ids and delta of `ids` whose image placeholder runs hold images of `grids`
    (prompt order); InvalidArgument when they disagree."""
    runs = _runs(ids, tokens.image_token_id)
    merge2 = tokens.spatial_merge_size ** 2
    _check_runs(runs, [t * h * w // merge2 for t, h, w in grids], "image")
    return rope_positions(len(ids), runs, grids, tokens)


def build_prompt_media(prompt_ids: list[int], tokens: MediaTokens, audio: list[torch.Tensor],
                       images: list[ImageRows]) -> PromptMedia:
    """The PromptMedia of a prompt whose placeholder runs hold `audio` clips' rows and
    `images`' rows, each in prompt order; InvalidArgument when runs and rows disagree."""
    if not audio and not images:
        raise InvalidArgument("prompt media: no audio and no images (a text prompt needs no PromptMedia)")
    audio_runs = _runs(prompt_ids, tokens.audio_token_id)
    image_runs = _runs(prompt_ids, tokens.image_token_id)
    _check_runs(audio_runs, [a.shape[0] for a in audio], "audio")
    merge2 = tokens.spatial_merge_size ** 2
    for i, image in enumerate(images):
        t, h, w = image.grid
        if h % tokens.spatial_merge_size or w % tokens.spatial_merge_size or t * h * w // merge2 != len(image.embeds):
            raise InvalidArgument(f"images[{i}]: grid {image.grid} does not give its {len(image.embeds)} rows")
    _check_runs(image_runs, [len(im.embeds) for im in images], "image")
    positions, delta = rope_positions(len(prompt_ids), image_runs, [im.grid for im in images], tokens)
    runs = sorted([(s, n, a) for (s, n), a in zip(audio_runs, audio)]
                  + [(s, n, im.embeds) for (s, n), im in zip(image_runs, images)], key=lambda r: r[0])
    rows_at = torch.cat([torch.arange(s, s + n) for s, n, _ in runs])
    rows = torch.cat([r for _, _, r in runs])
    deepstack_at = torch.cat([torch.arange(s, s + n) for s, n in image_runs]) if image_runs \
        else torch.zeros(0, dtype=torch.int64)
    layers = len(images[0].deepstack) if images else 0
    deepstack = [torch.cat([im.deepstack[k] for im in images]) for k in range(layers)]
    return PromptMedia(positions, delta, rows_at, rows, deepstack_at, deepstack,
                       image_grids=tuple(tuple(int(v) for v in im.grid) for im in images))
