"""The 3D rotary embedding V-JEPA 2 uses in its encoder and its AC predictor.

A head of `head_dim` channels is cut into [depth | height | width | rest]; each of the
first three is `2 * ((head_dim // 3) // 2)` channels wide and rotated by the token's
position on that axis, the rest is left as is. Within an axis, channel pairs (2i, 2i+1)
are rotated as (-x[2i+1], x[2i]), but the angle table is the D/2 frequencies *tiled*
twice (not repeated per pair): the released weights were trained with that layout, so
it is kept bit for bit.

Tables are built once per grid in fp32 as full-head (cos, sin) pairs, [N, head_dim],
with cos = 1 and sin = 0 on the unrotated channels, so one multiply-add rotates a head.
"""
from __future__ import annotations

import torch


def axis_dim(head_dim: int) -> int:
    """Channels per rotated axis."""
    return 2 * ((head_dim // 3) // 2)


def _axis_table(pos: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """pos [N] -> (cos, sin) [N, dim] with the tiled frequency layout."""
    omega = torch.arange(dim // 2, dtype=torch.float32) / (dim / 2.0)
    omega = 1.0 / 10000**omega                        # [dim/2]
    freq = pos.to(torch.float32)[:, None] * omega      # [N, dim/2]
    return freq.cos().repeat(1, 2), freq.sin().repeat(1, 2)


def rope_table(d: torch.Tensor, h: torch.Tensor, w: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token positions on the three axes, each [N] -> (cos, sin) [N, head_dim] fp32."""
    dim = axis_dim(head_dim)
    rest = head_dim - 3 * dim
    cos_parts, sin_parts = [], []
    for pos in (d, h, w):
        c, s = _axis_table(pos, dim)
        cos_parts.append(c)
        sin_parts.append(s)
    cos_parts.append(torch.ones(len(d), rest))
    sin_parts.append(torch.zeros(len(d), rest))
    return torch.cat(cos_parts, dim=1), torch.cat(sin_parts, dim=1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., N, head_dim] rotated by a table [N, head_dim] (or broadcastable to x)."""
    pairs = x.unflatten(-1, (-1, 2))
    swapped = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (-x1, x0, -x3, x2, ...)
    return x * cos + swapped * sin


def grid_positions(num_frames: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row-major (frame, row, column) ids of a [num_frames, height, width] token grid, each [N]."""
    ids = torch.arange(num_frames * height * width)
    return ids // (height * width), (ids % (height * width)) // width, ids % width
