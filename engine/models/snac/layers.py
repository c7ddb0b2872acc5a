"""SNAC decoder layers with the `snac` package's module names (so its state dict loads by
name) and plain convolutions: weight norm is folded once at load (loader.py).

Tensors are [B, C, T] (batch, channels, time) throughout.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class Snake1d(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int, groups: int, kernel: int = 7) -> None:
        super().__init__()
        pad = ((kernel - 1) * dilation) // 2
        self.block = nn.Sequential(Snake1d(dim), nn.Conv1d(dim, dim, kernel, dilation=dilation, padding=pad,
                                                           groups=groups),
                                   Snake1d(dim), nn.Conv1d(dim, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        pad = (x.shape[-1] - y.shape[-1]) // 2
        if pad > 0:
            x = x[..., pad:-pad]
        return x + y


class NoiseBlock(nn.Module):
    """x + noise * linear(x), noise [B, 1, T] drawn from each row's own generator: a window
    decodes the same alone or in a batch. `generators` None: no noise."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(dim, dim, 1, bias=False)
        self.generators: list[torch.Generator] | None = None  # set by the decoder for one forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.generators is None:
            return x
        B, _, T = x.shape
        noise = torch.cat([torch.randn((1, 1, T), generator=g, dtype=x.dtype) for g in self.generators])
        return x + noise.to(x.device) * self.linear(x)


class DecoderBlock(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, stride: int, noise: bool, groups: int) -> None:
        super().__init__()
        layers = [Snake1d(input_dim),
                  nn.ConvTranspose1d(input_dim, output_dim, 2 * stride, stride=stride, padding=math.ceil(stride / 2),
                                     output_padding=stride % 2)]
        if noise:
            layers.append(NoiseBlock(output_dim))
        layers += [ResidualUnit(output_dim, d, groups) for d in (1, 3, 9)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class Decoder(nn.Module):
    """latent [B, latent_dim, T] -> audio [B, 1, T * hop]."""

    def __init__(self, latent_dim: int, channels: int, rates: tuple[int, ...], noise: bool, depthwise: bool) -> None:
        super().__init__()
        if depthwise:
            layers = [nn.Conv1d(latent_dim, latent_dim, 7, padding=3, groups=latent_dim),
                      nn.Conv1d(latent_dim, channels, 1)]
        else:
            layers = [nn.Conv1d(latent_dim, channels, 7, padding=3)]
        for i, stride in enumerate(rates):
            output_dim = channels // 2 ** (i + 1)
            layers.append(DecoderBlock(channels // 2 ** i, output_dim, stride, noise,
                                       groups=output_dim if depthwise else 1))
        layers += [Snake1d(output_dim), nn.Conv1d(output_dim, 1, 7, padding=3), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
