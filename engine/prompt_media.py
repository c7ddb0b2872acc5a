"""What a multimodal prompt carries besides its ids, and its part of one engine step.

A prompt with audio, images or videos has placeholder ids at the media's positions; the encoders'
rows replace those positions' embeddings, the vision tower's deepstack rows are added to
the output of the first decoder layers there, and every position has three rope ids
(time, height, width). Decode positions past the prompt move on together, shifted by
`delta`: position p >= num_prompt has ids (p + delta) on all three axes.

A prompt whose inputs are all embedding rows (the talker's) has no rows here: only its
rope ids.

Invariants: rows_at and deepstack_at are sorted prompt positions; rows[i] is the input of
position rows_at[i]; deepstack[layer][i] is added at deepstack_at[i].
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from core.errors import InvalidArgument


@dataclass
class PromptMedia:
    positions: torch.Tensor                 # [3, num_prompt] long rope ids
    delta: int                              # decode position p -> p + delta
    rows_at: torch.Tensor                   # [m] long
    rows: torch.Tensor                      # [m, hidden]
    deepstack_at: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))  # [v] long
    deepstack: list[torch.Tensor] = field(default_factory=list)                              # per layer [v, hidden]
    image_grids: tuple = ()                 # (t, h, w) patches per image, prompt order: the talker's rope needs them
    video_grids: tuple = ()                 # (t, h, w) per video, prompt order
    video_seconds: tuple = ()               # seconds per temporal patch, per video

    def __post_init__(self) -> None:
        if self.positions.dim() != 2 or self.positions.shape[0] != 3:
            raise InvalidArgument(f"media positions must be [3, prompt], got {tuple(self.positions.shape)}")
        if self.rows.dim() != 2 or self.rows.shape[0] != self.rows_at.numel():
            raise InvalidArgument(f"media has {self.rows_at.numel()} positions but rows {tuple(self.rows.shape)}")
        if any(d.shape != (self.deepstack_at.numel(), self.rows.shape[1]) for d in self.deepstack):
            raise InvalidArgument("deepstack rows must be [deepstack positions, hidden] per layer")
        n = self.positions.shape[1]
        for name in ("rows_at", "deepstack_at"):
            at = getattr(self, name)
            if at.numel() and (int(at.min()) < 0 or int(at.max()) >= n or bool((at[1:] <= at[:-1]).any())):
                raise InvalidArgument(f"media {name} must be sorted, distinct prompt positions in 0..{n - 1}")

    @property
    def num_prompt(self) -> int:
        return self.positions.shape[1]

    def positions_of(self, first: int, count: int) -> torch.Tensor:
        """[3, count] rope ids of positions first .. first + count - 1."""
        p = torch.arange(first, first + count)
        out = (p + self.delta).expand(3, -1).clone()
        in_prompt = p < self.num_prompt
        out[:, in_prompt] = self.positions[:, p[in_prompt]]
        return out


def _within(at: torch.Tensor, first: int, count: int) -> torch.Tensor:
    return (at >= first) & (at < first + count)


@dataclass
class StepMedia:
    """One step's media inputs over its flat rows: positions [3, T], splices (rows
    [k], values [k, hidden]) and per-layer deepstack additions (rows, values)."""
    positions: torch.Tensor
    splice_rows: torch.Tensor
    splice_values: torch.Tensor | None
    additions: list[tuple[torch.Tensor, torch.Tensor]]

    def splice(self, embeds: torch.Tensor) -> torch.Tensor:
        """The step's input embeddings [T, hidden] with the media rows in place."""
        if self.splice_values is None:
            return embeds
        return embeds.index_put((self.splice_rows.to(embeds.device),), self.splice_values.to(embeds.device,
                                                                                           embeds.dtype))


def step_media(seqs, firsts: np.ndarray, counts: list[int], flat_positions: np.ndarray) -> StepMedia | None:
    """The media part of a step over `seqs` (each computing counts[i] tokens from firsts[i]);
    None when no sequence of the step has media (1-D positions, nothing spliced)."""
    if all(s.media is None for s in seqs):
        return None
    positions = torch.from_numpy(flat_positions).expand(3, -1).clone()  # text rows: the 1-D ids on every axis
    splice_rows, splice_values, adds = [], [], {}
    start = 0
    for seq, first, count in zip(seqs, firsts.tolist(), counts):
        media = seq.media
        if media is not None:
            positions[:, start:start + count] = media.positions_of(first, count)
            keep = _within(media.rows_at, first, count)
            if keep.any():
                splice_rows.append(media.rows_at[keep] - first + start)
                splice_values.append(media.rows[keep])
            keep = _within(media.deepstack_at, first, count)
            if keep.any():
                for layer, rows in enumerate(media.deepstack):
                    adds.setdefault(layer, []).append((media.deepstack_at[keep] - first + start, rows[keep]))
        start += count
    additions = [(torch.cat([r for r, _ in adds[i]]), torch.cat([v for _, v in adds[i]])) for i in sorted(adds)]
    if splice_rows:
        return StepMedia(positions, torch.cat(splice_rows), torch.cat(splice_values), additions)
    return StepMedia(positions, torch.zeros(0, dtype=torch.int64), None, additions)


def media_head(media: PromptMedia, num_tokens: int) -> PromptMedia:
    """The media of the first num_tokens positions (any count: past the prompt, the decode
    positions' rope ids are written out, so the result's prompt is num_tokens long)."""
    keep_rows, keep_deep = media.rows_at < num_tokens, media.deepstack_at < num_tokens
    return PromptMedia(media.positions_of(0, num_tokens), media.delta, media.rows_at[keep_rows],
                       media.rows[keep_rows], media.deepstack_at[keep_deep], [d[keep_deep] for d in media.deepstack],
                       media.image_grids, media.video_grids, media.video_seconds)


def continued_media(before: PromptMedia | None, num_before: int, after: PromptMedia | None,
                    num_after: int) -> PromptMedia | None:
    """The media of num_before positions (`before`, None: plain text) followed by num_after
    new ones (`after`, built as a prompt of its own, or None). The new part's rope ids go on
    from the next rope id of the first part (position + delta), as a decode would."""
    if before is None and after is None:
        return None
    like = (after if before is None else before).rows  # [m, hidden]: the width and dtype of media rows
    first = media_head(before, num_before) if before is not None else _plain(num_before, like)
    offset = num_before + first.delta  # the rope id of the first new position
    second = after if after is not None else _plain(num_after, like)
    layers = max(len(first.deepstack), len(second.deepstack))
    deep = [torch.cat([_layer(first, i, like), _layer(second, i, like)]) for i in range(layers)]
    return PromptMedia(torch.cat([first.positions, second.positions + offset], dim=1), first.delta + second.delta,
                       torch.cat([first.rows_at, second.rows_at + num_before]), torch.cat([first.rows, second.rows]),
                       torch.cat([first.deepstack_at, second.deepstack_at + num_before]), deep,
                       first.image_grids + second.image_grids, first.video_grids + second.video_grids,
                       first.video_seconds + second.video_seconds)


def _plain(num_tokens: int, like: torch.Tensor) -> PromptMedia:
    """Text positions: rope id = position on every axis, nothing spliced."""
    return PromptMedia(torch.arange(num_tokens).expand(3, -1).clone(), 0, torch.zeros(0, dtype=torch.int64),
                       like.new_zeros(0, like.shape[1]))


def _layer(media: PromptMedia, i: int, like: torch.Tensor) -> torch.Tensor:
    """Deepstack rows of layer i ([v, hidden]), none where the media has fewer layers."""
    if i < len(media.deepstack):
        return media.deepstack[i]
    return like.new_zeros(media.deepstack_at.numel(), like.shape[1])
