"""SD3's MMDiT (diffusers' `SD3Transformer2DModel`) with the checkpoint's flow schedule and
geometry: loading (optionally with layerwise offload), the batched velocity forward, the
initial noise, and the zero-input forward a lockstep rank pads with.

Denoising inputs of any requests and either CFG branch run as one transformer call when
their shapes match: the batch is the concatenation of the samples, each with its own
timestep, so a request's two branches on one replica are a batch of 2.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from engine.models.sd3.checkpoint import Sd3Geometry, attach_model_offload, geometry, load_model, read_config
from engine.models.sd3.schedule import FlowSchedule


class DenoiseInput(NamedTuple):
    """One sample of a denoising batch."""

    latent: torch.Tensor    # [1, C, h, w]
    embeds: torch.Tensor    # [1, S, D] text conditioning (D = joint_attention_dim)
    pooled: torch.Tensor    # [1, P] pooled conditioning (P = pooled_projection_dim)
    timestep: torch.Tensor  # [] the schedule's timestep (sigma * 1000)


class Sd3Dit:
    def __init__(self, transformer, schedule: FlowSchedule, geom: Sd3Geometry, device: str = "cpu") -> None:
        self.transformer = transformer
        self.schedule = schedule
        self.geometry = geom
        self.dtype: torch.dtype = transformer.dtype
        self.device = torch.device(device)
        cfg = transformer.config
        self.embed_dims = (int(cfg.joint_attention_dim), int(cfg.pooled_projection_dim))  # (D, P)

    @classmethod
    def load(cls, checkpoint: str | Path, dtype: str = "float32", device: str = "cpu", offload=None,
             group=None) -> "Sd3Dit":
        """offload: an engine.offload.OffloadConfig (default: the process's); the
        transformer's blocks then stream through two slots. group: the process group an
        AllGather transfer gathers over (a dlo_group's)."""
        from diffusers import SD3Transformer2DModel

        from engine.offload.loading import effective_config

        transformer = load_model(SD3Transformer2DModel, checkpoint, "transformer", dtype, device)
        transformer.offload_backend = attach_model_offload(transformer, checkpoint, "transformer",
                                                           effective_config(offload, "stateless"), group=group)
        geom = geometry(checkpoint)
        return cls(transformer, FlowSchedule(read_config(checkpoint, "scheduler"), geom.patch_size), geom, device)

    def initial_latent(self, shape: tuple[int, ...], seed: int) -> torch.Tensor:
        """The initial noise of `shape` ([1, C, h, w]), drawn as diffusers' randn_tensor
        draws it on CPU, so a seed gives the reference pipeline's latent."""
        generator = torch.Generator("cpu").manual_seed(seed)
        return torch.randn(shape, generator=generator, dtype=self.dtype)

    @torch.inference_mode()
    def denoise(self, batch: list[DenoiseInput]) -> list[torch.Tensor]:
        """One transformer call over the batch -> each sample's velocity [1, C, h, w].
        The samples' latent and embedding shapes must match."""
        to = dict(device=self.device, dtype=self.dtype)
        latents = torch.cat([s[0] for s in batch]).to(**to)  # [B, C, h, w]
        embeds = torch.cat([s[1] for s in batch]).to(**to)   # [B, S, D]
        pooled = torch.cat([s[2] for s in batch]).to(**to)   # [B, P]
        timesteps = torch.stack([s[3] for s in batch]).to(self.device)  # [B]
        velocity = self.transformer(hidden_states=latents, timestep=timesteps, encoder_hidden_states=embeds,
                                    pooled_projections=pooled, return_dict=False)[0]  # [B, C, h, w]
        return [velocity[i:i + 1].clone() for i in range(len(batch))]

    @torch.inference_mode()
    def pad_forward(self) -> None:
        """One forward of a zero input of one token: it streams (and gathers) every block
        as a real forward does; the output is dropped."""
        p = self.geometry.patch_size
        to = dict(device=self.device, dtype=self.dtype)
        self.transformer(hidden_states=torch.zeros(1, self.geometry.latent_channels, p, p, **to),
                         timestep=torch.zeros(1, device=self.device),
                         encoder_hidden_states=torch.zeros(1, 1, self.embed_dims[0], **to),
                         pooled_projections=torch.zeros(1, self.embed_dims[1], **to), return_dict=False)
