"""Qwen3-Omni's audio tower: log-mel frames -> one thinker embedding row per audio token.

Module names follow the checkpoint's (`thinker.audio_tower.` + conv2d1, layers.N.self_attn.q_proj,
..., proj2), so tensors map to parameters by name. A clip's frames are cut into chunks of
2 * n_window frames (the last one shorter), each chunk goes through three stride-2
convolutions on its own (13 tokens per full chunk) plus sinusoidal positions restarting at
every chunk; attention then runs within windows of n_window_infer frames' worth of tokens of
one clip. Clips of a batch never see each other, so a batch gives each clip its solo rows.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.qwen3_omni.encoder_config import AudioEncoderConfig


def output_lengths(frames: torch.Tensor, n_window: int) -> torch.Tensor:
    """Tokens out of the convolutions for `frames` mel frames (elementwise, int tensor).
    A full chunk of 2 * n_window frames gives 13 tokens (three stride-2 halvings of 100)."""
    chunk = n_window * 2
    tail = frames % chunk
    tail_tokens = (((tail - 1) // 2 + 1 - 1) // 2 + 1 - 1) // 2 + 1
    return tail_tokens + (frames // chunk) * 13


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """[length, channels] fp32: sin | cos halves, as the checkpoint's encoder computes them
    (on the CPU even under a meta-device context)."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2, device="cpu").float())
    scaled = torch.arange(length, device="cpu")[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


class AudioAttention(nn.Module):
    def __init__(self, config: AudioEncoderConfig):
        super().__init__()
        d = config.d_model
        self.num_heads = config.num_heads
        self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.v_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [N, d], mask [N, N] bool
        n = x.shape[0]
        q, k, v = (p(x).reshape(n, self.num_heads, -1).transpose(0, 1) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)  # [1, H, N, Dh]
        return self.out_proj(out[0].transpose(0, 1).reshape(n, -1))


class AudioEncoderLayer(nn.Module):
    def __init__(self, config: AudioEncoderConfig):
        super().__init__()
        d = config.d_model
        self.self_attn = AudioAttention(config)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class AudioEncoder(nn.Module):
    def __init__(self, config: AudioEncoderConfig):
        super().__init__()
        self.config = config
        c = config.downsample_hidden_size
        self.conv2d1 = nn.Conv2d(1, c, 3, 2, padding=1)
        self.conv2d2 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv2d3 = nn.Conv2d(c, c, 3, 2, padding=1)
        self.conv_out = nn.Linear(config.conv_out_features, config.d_model, bias=False)
        self.layers = nn.ModuleList(AudioEncoderLayer(config) for _ in range(config.num_layers))
        self.ln_post = nn.LayerNorm(config.d_model)
        self.proj1 = nn.Linear(config.d_model, config.d_model)
        self.proj2 = nn.Linear(config.d_model, config.output_dim)
        # not a buffer: a model built on the meta device keeps exact values
        self._positions = sinusoids(config.max_source_positions, config.d_model)

    def _chunks(self, features: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Clips [mel, frames_i] -> (padded chunks [C, 1, mel, longest], chunk frame counts [C])."""
        size = 2 * self.config.n_window
        pieces = [piece for f in features for piece in f.T.split(size, dim=0)]  # each [frames, mel]
        lengths = torch.tensor([p.shape[0] for p in pieces])
        padded = nn.utils.rnn.pad_sequence(pieces, batch_first=True).transpose(1, 2)  # [C, mel, longest]
        return padded.unsqueeze(1), lengths

    def _attention_mask(self, token_counts: list[int], max_chunk_tokens: int) -> torch.Tensor:
        """[N, N] bool: True within one attention window of one clip."""
        window = max_chunk_tokens * (self.config.n_window_infer // (2 * self.config.n_window))
        sizes = []
        for n in token_counts:
            sizes += [window] * (n // window) + ([n % window] if n % window else [])
        segment = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        return segment[:, None] == segment[None, :]

    @torch.no_grad()
    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """Clips' log-mel frames, each [num_mel_bins, frames_i] -> rows [tokens_i, output_dim] each."""
        n_window = self.config.n_window
        chunks, chunk_frames = self._chunks(features)
        x = chunks.to(self.conv2d1.weight.dtype)
        for conv in (self.conv2d1, self.conv2d2, self.conv2d3):
            x = F.gelu(conv(x))
        b, c, f, t = x.shape
        x = self.conv_out(x.permute(0, 3, 1, 2).contiguous().view(b, t, c * f))  # [C, t, d]
        x = x + self._positions[:t].to(x.device, x.dtype)[None]
        chunk_tokens = output_lengths(chunk_frames, n_window)  # [C]
        valid = torch.arange(t)[None, :] < chunk_tokens[:, None]  # [C, t]
        x = x[valid.to(x.device)]  # [N, d], chunks in order
        token_counts = [int(output_lengths(torch.tensor(f.shape[1]), n_window)) for f in features]
        mask = self._attention_mask(token_counts, int(chunk_tokens.max())).to(x.device)
        for layer in self.layers:
            x = layer(x, mask)
        x = self.proj2(F.gelu(self.proj1(self.ln_post(x))))
        return list(x.split(token_counts))
