"""SNAC decode: codes of every level -> audio, with per-window seeded noise.

`decode(levels, noise_seeds)`: levels [B, n * stride_0 / stride_l] int64 per level (the
coarsest first), noise_seeds one int per batch row (None: no noise). Row b's noise comes
from a generator seeded with noise_seeds[b], drawn block after block in the order the
`snac` package draws from torch's global RNG, so with batch 1 and torch.manual_seed(seed)
the package decodes the same audio.
"""
from __future__ import annotations

import torch
from torch import nn

from engine.batch_invariant import batch_invariant_convs
from engine.models.snac.config import SnacConfig
from engine.models.snac.layers import Decoder, NoiseBlock


class CodeProjection(nn.Module):
    """One level's codebook and its 1x1 out projection (named as the package's VectorQuantize)."""

    def __init__(self, config: SnacConfig, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.codebook = nn.Embedding(config.codebook_size, config.codebook_dim)
        self.out_proj = nn.Conv1d(config.codebook_dim, config.latent_dim, 1)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, t] -> latent [B, latent_dim, t * stride]."""
        z = self.out_proj(self.codebook(codes).transpose(1, 2))
        return z.repeat_interleave(self.stride, dim=-1)


class Quantizer(nn.Module):
    def __init__(self, config: SnacConfig) -> None:
        super().__init__()
        self.quantizers = nn.ModuleList(CodeProjection(config, s) for s in config.vq_strides)

    def forward(self, levels: list[torch.Tensor]) -> torch.Tensor:
        z = self.quantizers[0](levels[0])
        for quantizer, codes in zip(self.quantizers[1:], levels[1:]):
            z = z + quantizer(codes)
        return z


class SnacDecoder(nn.Module):
    def __init__(self, config: SnacConfig) -> None:
        super().__init__()
        self.config = config
        self.quantizer = Quantizer(config)
        self.decoder = Decoder(config.latent_dim, config.decoder_dim, config.decoder_rates, config.noise,
                               config.depthwise)
        self.noise_blocks = [m for m in self.decoder.modules() if isinstance(m, NoiseBlock)]

    @torch.inference_mode()
    def decode(self, levels: list[torch.Tensor], noise_seeds: list[int] | None = None) -> torch.Tensor:
        """levels (see the module docstring) -> audio [B, T * hop] float; each window's
        audio is bit-identical whatever else is in the batch."""
        generators = None
        if noise_seeds is not None:
            generators = [torch.Generator().manual_seed(int(s)) for s in noise_seeds]
        for block in self.noise_blocks:
            block.generators = generators
        try:
            with batch_invariant_convs():  # a window's audio is the same whatever its batch
                return self.decoder(self.quantizer(levels))[:, 0]
        finally:
            for block in self.noise_blocks:
                block.generators = None

    @classmethod
    def from_checkpoint(cls, directory: str, device: str = "cpu", dtype: torch.dtype = torch.float32) -> "SnacDecoder":
        from engine.models.snac.loader import load_snac

        return load_snac(directory, device, dtype)
