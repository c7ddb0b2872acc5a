"""Qwen3-Omni's code2wav: codec codes -> 24 kHz waveform, as a stateless engine model.

codes [B, Q, T] (Q code groups per frame) -> summed-offset embedding averaged over the
groups [B, T, hidden] -> sliding-window causal transformer -> transposed-conv
upsampling with ConvNeXt blocks (x prod(upsampling_ratios)) -> a causal conv decoder of
SnakeBeta blocks (x prod(upsample_rates)) -> wav [B, 1, S], clamped to [-1, 1].

Every stage is causal, so the audio of a frame depends only on it and earlier frames.
The transposed convolutions drop (kernel - stride) samples at the window's end, so a
window of T frames yields T * samples_per_frame minus a fixed shortfall (555 samples
with the real model's rates), missing at its end. Streaming decodes a window of
left-context frames plus new frames and drops the context's samples (`decode_window`,
`chunked_decode`), as transformers' `Qwen3OmniMoeCode2Wav.chunked_decode` does.

Checkpoint: the full Qwen3-Omni layout; config.json's `code2wav_config`, tensors
`code2wav.*` whose names (minus the prefix) are this module's parameter names.
"""
from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from engine.batch_invariant import batch_invariant_convs
from engine.models.loader import _checkpoint_dir, _read_json, _Tensors, weight_files
from engine.model_config import DTYPES
from engine.offload.config import OffloadConfig
from engine.offload.loading import attach_offload, effective_config, prepare_host_weights, skipped_names
from engine.models.qwen3_omni.code2wav_layers import (CausalConvNet, CausalTransConvNet, ConvNeXtBlock, DecoderBlock,
                                           PreTransformer, SnakeBeta)
from core.errors import InvalidArgument
from engine.models.meta_device import meta_device

PREFIX = "code2wav."
_POSITIVE = ("codebook_size", "num_quantizers", "hidden_size", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "sliding_window", "decoder_dim")


@dataclass(frozen=True)
class Code2WavConfig:
    """The `code2wav_config` of a Qwen3-Omni checkpoint (defaults: transformers' defaults)."""

    codebook_size: int = 2048
    num_quantizers: int = 16           # code groups per frame (Q)
    hidden_size: int = 1024
    num_hidden_layers: int = 8
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 0                  # 0: hidden_size // num_attention_heads
    intermediate_size: int = 3072
    sliding_window: int = 72           # frames a query sees, itself included
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    attention_bias: bool = False
    hidden_act: str = "silu"
    decoder_dim: int = 1536
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)   # decoder blocks
    upsampling_ratios: tuple[int, ...] = (2, 2)      # transposed convs after the transformer
    rope_scaling = None  # not a field: engine.models.rope.RotaryEmbedding reads it (plain rope)

    def __post_init__(self) -> None:
        if self.head_dim == 0 and self.num_attention_heads > 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        for name in _POSITIVE:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgument(f"code2wav_config.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.num_hidden_layers, int) or self.num_hidden_layers < 0:
            raise InvalidArgument(f"code2wav_config.num_hidden_layers must be >= 0, got {self.num_hidden_layers!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise InvalidArgument(f"code2wav_config.num_attention_heads ({self.num_attention_heads}) must be a "
                                  f"multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise InvalidArgument(f"code2wav_config.head_dim must be even for rope, got {self.head_dim}")
        if self.hidden_act != "silu":
            raise InvalidArgument(f"code2wav_config.hidden_act {self.hidden_act!r} is not supported (only 'silu')")
        if not self.rms_norm_eps > 0 or not self.rope_theta > 0:
            raise InvalidArgument("code2wav_config.rms_norm_eps and rope_parameters.rope_theta must be > 0")
        for name in ("upsample_rates", "upsampling_ratios"):
            rates = getattr(self, name)
            if not rates or any(not isinstance(r, int) or r < 1 for r in rates):
                raise InvalidArgument(f"code2wav_config.{name} must be a non-empty list of positive integers, "
                                      f"got {rates!r}")
        if self.decoder_dim // 2 ** len(self.upsample_rates) < 1:
            raise InvalidArgument(f"code2wav_config.decoder_dim ({self.decoder_dim}) is too small for "
                                  f"{len(self.upsample_rates)} halving decoder blocks")

    @classmethod
    def from_hf(cls, section: dict) -> "Code2WavConfig":
        """From config.json's `code2wav_config` dict; unknown keys are ignored."""
        rope = section.get("rope_parameters") or {}
        if not isinstance(rope, dict) or rope.get("rope_type", "default") != "default":
            raise InvalidArgument(f"code2wav_config.rope_parameters {rope!r}: only rope_type 'default' is supported")
        known = {f.name for f in fields(cls)} - {"rope_theta"}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in section.items() if k in known}
        values["head_dim"] = values.get("head_dim") or 0
        theta = rope.get("rope_theta", section.get("rope_theta", cls.rope_theta))
        return cls(**values, rope_theta=float(theta))

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates + self.upsampling_ratios)


class Code2Wav(nn.Module):
    """codes [B, Q, T] int64 -> wav [B, 1, S]; see the module docstring."""

    def __init__(self, config: Code2WavConfig):
        super().__init__()
        c = self.config = config
        self.pre_transformer = PreTransformer(c)
        self.code_embedding = nn.Embedding(c.codebook_size * c.num_quantizers, c.hidden_size)
        self.upsample = nn.ModuleList(
            nn.ModuleList([CausalTransConvNet(c.hidden_size, c.hidden_size, f, f), ConvNeXtBlock(c.hidden_size)])
            for f in c.upsampling_ratios)
        blocks = [DecoderBlock(c.decoder_dim // 2 ** i, c.decoder_dim // 2 ** (i + 1), rate)
                  for i, rate in enumerate(c.upsample_rates)]
        out_dim = c.decoder_dim // 2 ** len(c.upsample_rates)
        self.decoder = nn.ModuleList([CausalConvNet(c.hidden_size, c.decoder_dim, 7), *blocks,
                                      SnakeBeta(out_dim), CausalConvNet(out_dim, 1, 7)])

    @classmethod
    def from_checkpoint(cls, checkpoint_dir: str | Path, dtype: str | torch.dtype | None = None,
                        device: str | torch.device = "cpu", offload: OffloadConfig | None = None) -> "Code2Wav":
        """Loads `code2wav_config` and the `code2wav.*` tensors (safetensors, mmap).
        dtype: "float32" / "bfloat16" / "float16" or a torch dtype; default: the checkpoint's.
        offload: as engine.models.loader.load_model (the blocks of offload_blocks() stream)."""
        path = _checkpoint_dir(checkpoint_dir)
        raw = _read_json(path / "config.json")
        section = raw.get("code2wav_config")
        if not isinstance(section, dict):
            raise InvalidArgument(f"{path / 'config.json'}: no code2wav_config (not a Qwen3-Omni checkpoint?)")
        config = Code2WavConfig.from_hf(section)
        offload = effective_config(offload, "stateless")
        with meta_device():
            model = cls(config)
        model = model.to(dtype=_torch_dtype(dtype or raw.get("dtype") or raw.get("torch_dtype"))).to_empty(
            device="cpu" if offload else device)
        files = weight_files(path)
        sources = [(name, PREFIX + name, None) for name, _ in model.named_parameters()]
        mapped = prepare_host_weights(model, offload, files, sources)
        _load(model, path, skipped_names(mapped))
        model = model.requires_grad_(False).eval()
        model.offload_backend = attach_offload(model, offload, mapped, device)
        return model

    def offload_blocks(self) -> list[str]:
        """The streamed block stacks in execution order: the transformer layers, then the
        decoder's upsampling blocks (the heaviest convolutions)."""
        layers = [f"pre_transformer.layers.{i}" for i in range(len(self.pre_transformer.layers))]
        return layers + [f"decoder.{i}" for i, m in enumerate(self.decoder) if isinstance(m, DecoderBlock)]

    @property
    def samples_per_frame(self) -> int:
        """Audio samples per code frame: the product of upsample_rates and upsampling_ratios."""
        return self.config.samples_per_frame

    @torch.no_grad()
    def forward(self, codes: torch.Tensor) -> torch.Tensor:  # [B, Q, T] int64 -> [B, 1, S]
        """Decodes whole windows; S = T * samples_per_frame minus the fixed end shortfall."""
        if codes.dim() != 3 or codes.shape[1] != self.config.num_quantizers:
            raise InvalidArgument(f"codes must be [B, {self.config.num_quantizers}, T], got {tuple(codes.shape)}")
        q = self.config.num_quantizers
        offsets = torch.arange(q, device=codes.device).view(1, q, 1) * self.config.codebook_size  # [1, Q, 1]
        hidden = self.code_embedding(codes + offsets).mean(1)  # [B, Q, T, hidden] -> [B, T, hidden]
        with batch_invariant_convs():  # a window's audio is the same whatever its batch
            # The transformer runs window by window: its matmuls over B*T rows took another BLAS
            # path than over T rows alone (~5e-8 apart, for T <= 3 on one CPU, T <= 2 on another).
            hidden = torch.cat([self.pre_transformer(hidden[b:b + 1]) for b in range(hidden.shape[0])])
            hidden = hidden.permute(0, 2, 1)  # [B, hidden, T]
            for blocks in self.upsample:
                for block in blocks:
                    hidden = block(hidden)  # [B, hidden, T * ratio so far]
            wav = hidden
            for block in self.decoder:
                wav = block(wav)  # [B, C, S'] ... -> [B, 1, S]
        return wav.clamp(min=-1, max=1)

    def decode_windows(self, codes: torch.Tensor, num_context: Sequence[int]) -> list[torch.Tensor]:
        """codes [B, T, Q] (frames first, as streamed) -> per window wav [S_b] without
        the first num_context[b] * samples_per_frame samples (its left context's audio)."""
        wav = self(codes.transpose(1, 2))  # [B, 1, S]
        return [wav[b, 0, n * self.samples_per_frame:] for b, n in enumerate(num_context)]

    def decode_window(self, codes: torch.Tensor, num_context: int = 0) -> torch.Tensor:
        """codes [T, Q] -> wav [S]: one window, minus its num_context frames' samples."""
        return self.decode_windows(codes[None], [num_context])[0]

    @torch.no_grad()
    def chunked_decode(self, codes: torch.Tensor, chunk_size: int = 300,
                       left_context_size: int = 25) -> torch.Tensor:  # [B, Q, T] -> [B, 1, S']
        """Decodes chunk_size new frames at a time after their left context
        (chunk_windows), dropping the context's samples, exactly as transformers does."""
        wavs = []
        for start, context, end in chunk_windows(codes.shape[-1], chunk_size, left_context_size):
            wav = self(codes[..., start - context:end])  # [B, 1, S_chunk]
            wavs.append(wav[..., context * self.samples_per_frame:])
        return torch.cat(wavs, dim=-1)


def chunk_windows(num_frames: int, chunk_size: int, left_context_size: int) -> list[tuple[int, int, int]]:
    """(start, num_context, end) of each chunk: new frames [start, end) after num_context
    frames of left context. As transformers' chunked_decode: a chunk takes
    left_context_size context frames only when start - left_context_size > 0, else every
    earlier frame (start of them)."""
    if chunk_size < 1 or left_context_size < 0:
        raise InvalidArgument(f"chunk_size ({chunk_size}) must be >= 1 and left_context_size "
                              f"({left_context_size}) >= 0")
    windows, start = [], 0
    while start < num_frames:
        end = min(start + chunk_size, num_frames)
        windows.append((start, left_context_size if start - left_context_size > 0 else start, end))
        start = end
    return windows


def _torch_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise InvalidArgument(f"dtype {dtype} is not one of {tuple(DTYPES)}")
        return dtype
    if dtype not in DTYPES:
        raise InvalidArgument(f"dtype {dtype!r} is not one of {tuple(DTYPES)}")
    return DTYPES[dtype]


def _load(model: Code2Wav, path: Path, skip: frozenset[str] = frozenset()) -> None:
    """Copies every parameter not in `skip` (mapped by the offload backend) from its
    `code2wav.<name>` tensor; shapes must match and no `code2wav.*` tensor may be left unused."""
    files = weight_files(path)
    params = dict(model.named_parameters())
    unused = sorted(n for n in files if n.startswith(PREFIX) and n[len(PREFIX):] not in params)
    if unused:
        raise InvalidArgument(f"checkpoint {str(path)!r}: code2wav tensors this model has no parameter for: "
                              f"{unused[:5]}{' ...' if len(unused) > 5 else ''}")
    with ExitStack() as stack:
        tensors = _Tensors(path, files, stack)
        for name, param in params.items():
            if name in skip:
                continue
            tensor = tensors.get(PREFIX + name)
            if tuple(tensor.shape) != tuple(param.shape):
                raise InvalidArgument(f"tensor {PREFIX + name!r} has shape {tuple(tensor.shape)}, "
                                      f"expected {tuple(param.shape)}")
            param.data.copy_(tensor)
