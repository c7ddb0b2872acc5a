"""Building blocks of Qwen3-Omni's code2wav vocoder (engine.models.qwen3_omni.code2wav).

Module and parameter names follow the checkpoint's `code2wav.*` tensors so weights load
by name. Everything is causal in time: convolutions pad on the left only, attention
is causal within a sliding window. Shapes: conv stacks work on [B, C, S] (channels
first), the transformer on [B, T, hidden].
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.layers import GatedMLP, RMSNorm
from engine.models.rope import RotaryEmbedding, apply_rope


class CausalConvNet(nn.Module):
    """Conv1d padded on the left by (effective kernel - stride), plus the right padding
    that makes the last stride window complete (zero for stride 1)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 stride: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation,
                              groups=groups)
        self.stride = stride
        self.kernel_size = (kernel_size - 1) * dilation + 1  # effective (dilated) kernel
        self.padding = self.kernel_size - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C_in, S] -> [B, C_out, ceil(S / stride)]
        length = x.shape[-1]
        num_frames = (length - self.kernel_size + self.padding) / self.stride + 1
        ideal = (math.ceil(num_frames) - 1) * self.stride + (self.kernel_size - self.padding)
        return self.conv(F.pad(x, (self.padding, ideal - length))).contiguous()


class CausalTransConvNet(nn.Module):
    """ConvTranspose1d with (kernel - stride) samples trimmed from both ends."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1):
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.trim = kernel_size - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C_in, L] -> [B, C_out, L*stride + stride - kernel]
        x = self.conv(x)  # [B, C_out, (L - 1) * stride + kernel]
        return x[..., self.trim: x.shape[-1] - self.trim].contiguous()


class ConvNeXtBlock(nn.Module):
    """x + gamma * pwconv2(gelu(pwconv1(layernorm(depthwise causal conv(x)))))."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConvNet(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, S] -> [B, C, S]
        h = self.dwconv(x).permute(0, 2, 1)  # [B, S, C]
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).permute(0, 2, 1)


class SnakeBeta(nn.Module):
    """x + sin^2(x * e^alpha) / (e^beta + 1e-9), per channel."""

    def __init__(self, dim: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, S] -> [B, C, S]
        alpha = torch.exp(self.alpha[None, :, None])  # [1, C, 1]
        beta = torch.exp(self.beta[None, :, None])
        return x + (1.0 / (beta + 1e-9)) * torch.pow(torch.sin(x * alpha), 2)


class ResidualUnit(nn.Module):
    """x + conv2(snake(conv1(snake(x)))), conv1 dilated with kernel 7, conv2 pointwise."""

    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConvNet(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConvNet(dim, dim, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, S] -> [B, C, S]
        return x + self.conv2(self.act2(self.conv1(self.act1(x))))


class DecoderBlock(nn.Module):
    """snake -> transposed conv upsampling by `rate` -> residual units dilated 1, 3, 9."""

    def __init__(self, in_dim: int, out_dim: int, rate: int):
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim), CausalTransConvNet(in_dim, out_dim, 2 * rate, rate),
                                    *(ResidualUnit(out_dim, d) for d in (1, 3, 9))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, in_dim, L] -> [B, out_dim, (L - 1) * rate]
        for layer in self.block:
            x = layer(x)
        return x


class LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def sliding_causal_mask(num_frames: int, window: int, device: torch.device) -> torch.Tensor:
    """[T, T] bool, True where query i may attend key j: i - window < j <= i."""
    pos = torch.arange(num_frames, device=device)
    diff = pos[:, None] - pos[None, :]  # [T, T] i - j
    return (diff >= 0) & (diff < window)


class WindowAttention(nn.Module):
    """Multi-head (grouped-query) self-attention with rope over a sliding causal mask."""

    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, bias: bool):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:  # x [B, T, hidden], cos/sin [T, 1, D], mask [T, T]
        b, t, _ = x.shape
        q = apply_rope(self.q_proj(x).view(b, t, self.num_heads, self.head_dim), cos, sin)  # [B, T, H, D]
        k = apply_rope(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim), cos, sin)  # [B, T, Hkv, D]
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim)  # [B, T, Hkv, D]
        groups = self.num_heads // self.num_kv_heads
        k, v = (z.transpose(1, 2).repeat_interleave(groups, dim=1) for z in (k, v))  # [B, H, T, D]
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask,
                                             scale=self.head_dim ** -0.5)  # [B, H, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))


class TransformerLayer(nn.Module):
    """Pre-norm attention and gated MLP, each residual branch scaled per channel."""

    def __init__(self, config):  # a Code2WavConfig
        super().__init__()
        c = config
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = WindowAttention(c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                                         c.head_dim, c.attention_bias)
        self.self_attn_layer_scale = LayerScale(c.hidden_size)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = GatedMLP(c.hidden_size, c.intermediate_size)
        self.mlp_layer_scale = LayerScale(c.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:  # [B, T, hidden] -> [B, T, hidden]
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class PreTransformer(nn.Module):
    """The transformer between the code embedding and the upsampler: sliding-window
    causal layers with rope (positions 0..T-1 of the window), then a final RMSNorm."""

    def __init__(self, config):  # a Code2WavConfig
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config)  # reads head_dim, rope_theta, rope_scaling (None)
        self.window = config.sliding_window

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, hidden] -> [B, T, hidden]
        num_frames = x.shape[1]
        cos, sin = self.rotary(torch.arange(num_frames, device=x.device), x.dtype)  # [T, 1, D] each
        mask = sliding_causal_mask(num_frames, self.window, x.device)  # [T, T]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)
