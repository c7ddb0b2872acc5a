"""Qwen3-Omni's vision tower: image patches -> one thinker embedding row per merged token,
plus the deepstack rows (one set per `deepstack_indexes` block) the thinker adds to the
output of its first layers at the image's positions.

Module names follow the checkpoint's (`thinker.visual.` + patch_embed.proj, pos_embed,
blocks.N.attn.qkv, ..., merger, merger_list.J). Input is the image processor's
pixel_values [N, C * T * P * P] in merge-block order with each image's grid (t, h, w) in
patches; attention stays within one frame of one image, so a batch gives each image its
solo rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.qwen3_omni.encoder_config import VisionEncoderConfig
from engine.models.qwen3_omni.vision_grid import frame_segments, position_taps, rotary_positions


@dataclass
class VisionOutput:
    embeds: list[torch.Tensor]                # per image [tokens_i, out_hidden]
    deepstack: list[list[torch.Tensor]]       # per image, per deepstack block [tokens_i, out_hidden]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class VisionAttention(nn.Module):
    def __init__(self, config: VisionEncoderConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv(x).reshape(n, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)  # each [N, H, Dh]
        q, k = ((t.float() * cos + _rotate_half(t.float()) * sin).to(t.dtype) for t in (q, k))  # rope in fp32
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                             v.transpose(0, 1)[None], attn_mask=mask)  # [1, H, N, Dh]
        return self.proj(out[0].transpose(0, 1).reshape(n, -1))


class VisionMLP(nn.Module):
    def __init__(self, config: VisionEncoderConfig):
        super().__init__()
        self.linear_fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.linear_fc2 = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate="tanh"))


class VisionBlock(nn.Module):
    def __init__(self, config: VisionEncoderConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=1e-6)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=1e-6)
        self.attn = VisionAttention(config)
        self.mlp = VisionMLP(config)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.norm1(x), cos, sin, mask)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """merge x merge patches -> one out_hidden row; the deepstack mergers normalize after
    gathering the patches (`after_merge`), the final one before."""

    def __init__(self, config: VisionEncoderConfig, after_merge: bool):
        super().__init__()
        self.width = config.hidden_size * config.merge_unit
        self.after_merge = after_merge
        self.ln_q = nn.LayerNorm(self.width if after_merge else config.hidden_size, eps=1e-6)
        self.mlp = nn.ModuleList([nn.Linear(self.width, self.width), nn.GELU(),
                                  nn.Linear(self.width, config.out_hidden_size)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N / merge_unit, out_hidden]
        x = self.ln_q(x.view(-1, self.width)) if self.after_merge else self.ln_q(x).view(-1, self.width)
        for layer in self.mlp:
            x = layer(x)
        return x


class PatchEmbed(nn.Module):
    def __init__(self, config: VisionEncoderConfig):
        super().__init__()
        self.config = config
        kernel = (config.temporal_patch_size, config.patch_size, config.patch_size)
        self.proj = nn.Conv3d(config.in_channels, config.hidden_size, kernel_size=kernel, stride=kernel)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:  # [N, patch_dim] -> [N, hidden]
        c = self.config
        x = pixels.view(-1, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size)
        return self.proj(x.to(self.proj.weight.dtype)).view(-1, c.hidden_size)


class VisionEncoder(nn.Module):
    def __init__(self, config: VisionEncoderConfig):
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config)
        self.pos_embed = nn.Embedding(config.num_position_embeddings, config.hidden_size)
        self.blocks = nn.ModuleList(VisionBlock(config) for _ in range(config.depth))
        self.merger = PatchMerger(config, after_merge=False)
        self.merger_list = nn.ModuleList(PatchMerger(config, after_merge=True) for _ in config.deepstack_indexes)
        quarter = config.head_dim // 2
        # not a buffer: a model built on the meta device keeps exact frequencies
        self._inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, quarter, 2, dtype=torch.float, device="cpu")
                                                / quarter))

    def _rotary(self, grid: list[tuple[int, int, int]], device) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) [N, 1, head_dim] fp32: row angles | col angles, repeated for both halves."""
        freqs = rotary_positions(grid, self.config.spatial_merge_size).to(device)[..., None].float() \
            * self._inv_freq.to(device)  # [N, 2, head_dim / 4]
        angles = torch.cat([freqs[:, 0], freqs[:, 1]], dim=-1)
        angles = torch.cat([angles, angles], dim=-1)[:, None, :]
        return angles.cos(), angles.sin()

    @torch.no_grad()
    def forward(self, pixel_values: torch.Tensor, grid_thw: list[tuple[int, int, int]]) -> VisionOutput:
        c = self.config
        device = self.pos_embed.weight.device
        x = self.patch_embed(pixel_values.to(device))  # [N, hidden]
        side = int(c.num_position_embeddings ** 0.5)
        taps, weights = position_taps(grid_thw, c.spatial_merge_size, side)
        x = x + (self.pos_embed(taps.to(device)) * weights.to(device)[:, :, None]).sum(1).to(x.dtype)
        cos, sin = self._rotary(grid_thw, device)
        segment = frame_segments(grid_thw).to(device)
        mask = segment[:, None] == segment[None, :]
        deepstack = []
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask)
            if i in c.deepstack_indexes:
                deepstack.append(self.merger_list[c.deepstack_indexes.index(i)](x))
        sizes = [t * h * w // c.merge_unit for t, h, w in grid_thw]
        per_layer = [d.split(sizes) for d in deepstack]
        return VisionOutput(list(self.merger(x).split(sizes)),
                            [[layer[i] for layer in per_layer] for i in range(len(sizes))])
