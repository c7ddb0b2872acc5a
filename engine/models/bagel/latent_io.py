"""How VAE latents enter and leave the backbone (the generation side's modules that live
in ema.safetensors beside the LLM: vae2llm, llm2vae, time_embedder, latent_pos_embed).

A VAE latent [C, H/8, W/8] is cut into p x p patches (p = latent_patch_size), one token
each, its values ordered (p_row, p_col, channel): [h * w, p * p * C] tokens, row-major
over the h x w patch grid. A token enters as

    vae2llm(patch) + time_embedder(t) + latent_pos_embed(row * max_latent_size + col)

(t = 0 for a clean image put into a context, the flow time for a noisy one), runs
through the generation expert, and its final hidden leaves as the velocity
llm2vae(hidden) [p * p * C].
"""
from __future__ import annotations

import torch
from torch import nn

from engine.models.bagel.config import BagelDefaults
from engine.models.bagel.sincos import PositionTable
from engine.models.bagel.timestep_embedder import TimestepEmbedder


class LatentIO(nn.Module):
    def __init__(self, hidden_size: int, defaults: BagelDefaults):
        super().__init__()
        self.patch_size = defaults.latent_patch_size
        self.channels = defaults.latent_channels
        dim = defaults.patch_latent_dim
        self.vae2llm = nn.Linear(dim, hidden_size)
        self.llm2vae = nn.Linear(hidden_size, dim)
        self.time_embedder = TimestepEmbedder(hidden_size)
        self.latent_pos_embed = PositionTable(defaults.max_latent_size, hidden_size)

    def embed(self, patches: torch.Tensor, timesteps: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """patches [N, p*p*C], timesteps [N] (or [1], broadcast), position_ids [N] -> [N, hidden]."""
        x = self.vae2llm(patches.to(self.vae2llm.weight.dtype))
        return x + self.time_embedder(timesteps.reshape(-1)) + self.latent_pos_embed(position_ids)

    def velocity(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, p*p*C]
        return self.llm2vae(hidden)

    def patchify(self, latent: torch.Tensor) -> torch.Tensor:
        """[C, h*p, w*p] -> [h * w, p * p * C] (values ordered p_row, p_col, channel)."""
        p, (c, height, width) = self.patch_size, latent.shape
        h, w = height // p, width // p
        x = latent[:, :h * p, :w * p].reshape(c, h, p, w, p)
        return x.permute(1, 3, 2, 4, 0).reshape(h * w, p * p * c)

    def unpatchify(self, tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """[h * w, p * p * C] -> [C, h*p, w*p], patchify's inverse."""
        p, c = self.patch_size, self.channels
        x = tokens.reshape(h, w, p, p, c)
        return x.permute(4, 0, 2, 1, 3).reshape(c, h * p, w * p)
