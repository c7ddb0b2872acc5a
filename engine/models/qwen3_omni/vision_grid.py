"""Where each patch of an image sits, for the vision tower: its rotary (row, col), its
learned position (bilinear taps into the square position table) and its attention segment.

Patches arrive in merge-block order, as the image processor emits them: for a grid of
t x h x w patches, frame by frame, blocks of merge x merge patches in raster order of
blocks, raster order inside a block (so each thinker token's patches are contiguous).
"""
from __future__ import annotations

import torch


def block_order_rows_cols(h: int, w: int, merge: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row [h*w], col [h*w]) of one frame's patches in merge-block order."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    shape = (h // merge, merge, w // merge, merge)
    return rows.reshape(shape).transpose(1, 2).flatten(), cols.reshape(shape).transpose(1, 2).flatten()


def rotary_positions(grid_thw: list[tuple[int, int, int]], merge: int) -> torch.Tensor:
    """[N, 2] long (row, col) of every patch of every image."""
    out = []
    for t, h, w in grid_thw:
        rows, cols = block_order_rows_cols(h, w, merge)
        out.append(torch.stack([rows, cols], dim=-1).repeat(t, 1))
    return torch.cat(out)


def _taps(index: torch.Tensor, size: int, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bilinear, align_corners=True taps of `index` (positions on an axis of `size`) into
    an axis of `side` entries: (taps [n, 2] long, weights [n, 2] fp32)."""
    src = index.float() * (side - 1) / max(size - 1, 1)
    floor = torch.floor(src)
    offsets = torch.arange(2)
    taps = (floor.long()[:, None] + offsets).clamp(0, side - 1)
    weights = (1 - (src[:, None] - floor[:, None] - offsets).abs()).clamp(min=0)
    return taps, weights


def position_taps(grid_thw: list[tuple[int, int, int]], merge: int, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices [N, 4], weights [N, 4]) into the flattened side x side position table: the
    table resampled to each image's h x w grid (bilinear, corners aligned)."""
    indices, weights = [], []
    for t, h, w in grid_thw:
        rows, cols = block_order_rows_cols(h, w, merge)
        row_taps, row_w = _taps(rows, h, side)
        col_taps, col_w = _taps(cols, w, side)
        indices.append((row_taps[:, :, None] * side + col_taps[:, None, :]).reshape(-1, 4).repeat(t, 1))
        weights.append((row_w[:, :, None] * col_w[:, None, :]).reshape(-1, 4).repeat(t, 1))
    return torch.cat(indices), torch.cat(weights)


def frame_segments(grid_thw: list[tuple[int, int, int]]) -> torch.Tensor:
    """[N] segment id of each patch: one segment per frame of each image (attention stays inside)."""
    sizes = [h * w for t, h, w in grid_thw for _ in range(t)]
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
