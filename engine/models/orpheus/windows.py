"""The streaming rule of the reference decoder, and the window -> SNAC code layout.

After every 7th accepted code, once more than 27 are accepted, the last WINDOW_CODES
codes (4 frames) are decoded and samples EMIT_START:EMIT_END of the result are emitted
(the window's second frame, 85 ms at 24 kHz). A window holding a code outside
0..4095 emits nothing. The residual at the end of the stream (fewer than 7 codes after
the last window) is not decoded, as in the reference: the stream's first frame and its
last two frames are never heard (docs/orpheus.md).
In a frame of 7 codes, SNAC level 0 takes position 0, level 1 positions 1 and 4,
level 2 positions 2, 3, 5, 6.
"""
from __future__ import annotations

import torch

from engine.models.orpheus.audio_codes import CODEBOOK_SIZE, CODES_PER_FRAME

WINDOW_CODES = 28      # 4 frames
STRIDE_CODES = 7       # 1 frame
EMIT_START, EMIT_END = 2048, 4096
LEVEL_POSITIONS = ((0,), (1, 4), (2, 3, 5, 6))


def window_ends(num_codes: int) -> list[int]:
    """Stream positions after which the reference decodes a window (exclusive ends)."""
    return list(range(WINDOW_CODES, num_codes + 1, STRIDE_CODES))


def is_valid(window: torch.Tensor) -> bool:
    """A window SNAC can decode: whole frames, every code in 0..4095."""
    return window.numel() > 0 and window.numel() % CODES_PER_FRAME == 0 and \
        int(window.min()) >= 0 and int(window.max()) < CODEBOOK_SIZE


def is_regular(num_codes: int, num_context: int, start: int) -> bool:
    """A SlidingWindow chunk the reference decodes: 28 codes, the first window or 7 new after
    21 of context (not the end-of-stream residual, whose new codes are fewer than 7)."""
    new = num_codes - num_context
    return num_codes == WINDOW_CODES and new == (WINDOW_CODES if start == 0 else STRIDE_CODES)


def snac_levels(windows: torch.Tensor) -> list[torch.Tensor]:
    """windows [B, 7F] int -> the three SNAC levels [B, F], [B, 2F], [B, 4F] (int64)."""
    frames = windows.reshape(windows.shape[0], -1, CODES_PER_FRAME).to(torch.int64)  # [B, F, 7]
    return [frames[:, :, list(pos)].reshape(windows.shape[0], -1) for pos in LEVEL_POSITIONS]


def reference_windows(codes: list[int]) -> list[tuple[int, torch.Tensor]]:
    """(end, window [28]) of every window the reference decodes, invalid ones included."""
    stream = torch.tensor(codes, dtype=torch.int64)
    return [(end, stream[end - WINDOW_CODES:end]) for end in window_ends(len(codes))]


_MASK64 = (1 << 64) - 1


def window_noise_seed(request_seed: int, end: int) -> int:
    """The SNAC noise seed of the window ending at stream position `end`: one generator per
    window, so its audio does not depend on what else was decoded in its batch (splitmix64,
    the same in every process)."""
    x = (int(request_seed) * 0x9E3779B97F4A7C15 + int(end)) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) & ((1 << 63) - 1)
