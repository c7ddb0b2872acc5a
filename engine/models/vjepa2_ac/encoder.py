"""The V-JEPA 2 video encoder: a ViT over tubelets (tubelet_size frames x patch x patch
pixels) with the 3D rotary embedding, in the module layout of transformers' VJEPA2Model
encoder (`embeddings.patch_embeddings.proj`, `layer.{i}.attention.{query,key,value,proj}`,
`layer.{i}.mlp.{fc1,fc2}`, `layernorm`), so its state dict loads as is.

Positions come from the configured grid (crop_size / patch_size square), as in the
reference: frames must be crop_size x crop_size (checked by the caller's validation).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.vjepa2_ac.config import EncoderConfig
from engine.models.vjepa2_ac.rope import grid_positions, rope_table, rotate


class PatchEmbed(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        kernel = (cfg.tubelet_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_chans, cfg.hidden_size, kernel_size=kernel, stride=kernel)


class Embeddings(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.patch_embeddings = PatchEmbed(cfg)


class Attention(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.num_heads = cfg.num_attention_heads
        self.query = nn.Linear(d, d, bias=cfg.qkv_bias)
        self.key = nn.Linear(d, d, bias=cfg.qkv_bias)
        self.value = nn.Linear(d, d, bias=cfg.qkv_bias)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (p(x).view(b, n, self.num_heads, -1).transpose(1, 2) for p in (self.query, self.key, self.value))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)   # [B, heads, N, head_dim]
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, -1))


class Mlp(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        hidden = int(cfg.hidden_size * cfg.mlp_ratio)
        self.fc1 = nn.Linear(cfg.hidden_size, hidden)
        self.fc2 = nn.Linear(hidden, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Layer(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attention = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = Mlp(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class VJEPA2Encoder(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.layer = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """frames [B, F, C, H, W] -> features [B, (F / tubelet) * grid^2, hidden], row-major
        over (timestep, row, column). Fewer frames than a tubelet are repeated to one."""
        cfg = self.config
        x = frames.permute(0, 2, 1, 3, 4)  # [B, C, F, H, W]
        if x.shape[2] < cfg.tubelet_size:
            x = x.repeat(1, 1, cfg.tubelet_size, 1, 1)
        proj = self.embeddings.patch_embeddings.proj
        x = proj(x.to(proj.weight.dtype)).flatten(2).transpose(1, 2)  # [B, T*g*g, hidden]
        cos, sin = self._table(x.shape[1], x.dtype)
        for layer in self.layer:
            x = layer(x, cos, sin)
        return self.layernorm(x)

    def _table(self, num_tokens: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.config.grid_size
        d, h, w = grid_positions(-(-num_tokens // (g * g)), g, g)
        cos, sin = rope_table(d[:num_tokens], h[:num_tokens], w[:num_tokens], self.config.head_dim)
        return cos.to(dtype), sin.to(dtype)  # [N, head_dim]
